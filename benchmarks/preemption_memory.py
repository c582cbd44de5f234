"""Preemption's CPU per pod in the production engine, on the in-memory cluster (no API server).

scheduler_perf's PreemptionBasic shape (``benchmarks.scheduler_perf --case PreemptionBasic``):
``--nodes`` nodes of 4 CPUs, each running four 900m priority-0 pods, then as many 3-CPU
priority-10 pods, each of which must evict three. Evictions are recorded at once and the victims
deleted ``--delay`` seconds later (KWOK's deletion lands after the eviction). The engine, the gang
runtime and preemption are the coordinator's own (``coordinator.adapters.memory``); the run ends
when every high-priority pod is bound. Prints the process CPU per bound pod, the scheduling
attempts, evictions and preemptions: a figure that moves far less with the machine's load than
the KWOK run's wall clock. Run: ``python -m benchmarks.preemption_memory [--nodes 500]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Mapping, Sequence

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.ports import PodRef
from coordinator.inventory.store import Inventory
from devcluster.pods import pod


class _LateDeletes(MemoryCluster):
    """Evictions counted, each victim deleted ``delay`` seconds later; ``done`` is set once
    ``want`` pods named ``high-…`` are bound."""

    def __init__(self, inventory: Inventory, delay: float, want: int) -> None:
        super().__init__(inventory)
        self.delay = delay
        self.evictions = 0
        self.bound = 0
        self.want = want
        self.done = asyncio.Event()

    async def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
        await super().bind(pod, node, annotations)
        if pod.name.startswith("high-"):
            self.bound += 1
            if self.bound >= self.want:
                self.done.set()

    async def evict(self, pod: PodRef, *, grace_period_s: int | None = None) -> None:
        self.evictions += 1
        loop = asyncio.get_running_loop()
        loop.call_later(self.delay, self.delete_pod, pod.namespace, pod.name)


async def run(nodes: int, delay: float, timeout_s: float) -> int:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = _LateDeletes(inventory, delay, nodes)
    for i in range(nodes):
        cluster.add_node(f"n{i}", allocatable={"cpu": "4", "memory": "32Gi", "pods": 110})
    for i in range(4 * nodes):
        low = pod(f"low-{i}", cpu="900m", memory="500Mi", node=f"n{i % nodes}", priority=0)
        cluster.create_pod(low)
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05))
    async with runtime, gangs:
        await runtime.settle()
        attempts = runtime.scheduler.stats.attempts
        began, cpu = time.monotonic(), time.process_time()
        for i in range(nodes):
            cluster.create_pod(pod(f"high-{i}", cpu="3", memory="500Mi", priority=10))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(cluster.done.wait(), timeout_s)
        wall, cpu = time.monotonic() - began, time.process_time() - cpu
        done = cluster.bound
        tries = runtime.scheduler.stats.attempts - attempts
        preemptor = gangs.preemptor
        print(
            f"{nodes} nodes: {done}/{nodes} bound in {wall:.1f} s, CPU {cpu:.2f} s = "
            f"{1000 * cpu / max(done, 1):.2f} ms per pod; {tries} attempts, "
            f"{cluster.evictions} evictions, "
            f"{preemptor.preemptions if preemptor is not None else 0} preemptions; "
            f"load {os.getloadavg()[0]:.1f}"
        )
        return 0 if done == nodes else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--delay", type=float, default=0.3, help="seconds from eviction to deletion")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args(argv)
    if args.nodes < 1:
        ap.error(f"--nodes: {args.nodes} is not a positive count")
    if args.delay < 0:
        ap.error(f"--delay: {args.delay} is negative")
    return asyncio.run(run(args.nodes, args.delay, args.timeout))


if __name__ == "__main__":
    sys.exit(main())
