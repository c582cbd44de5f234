"""The KWOK benchmark's nodes and pods through Topos' scheduler in one process: CPU per bound pod
of the engine and the core, without HTTP, JSON or an API server.

``--nodes`` Node objects as ``benchmarks/kwok_cluster.py`` writes them (DGX H100s, 32 to a leaf,
the agent's labels and ``topos.io/topology`` annotation, Ready) are listed into the inventory
through the API-server sync's own handlers; ``--pods`` pods of ``--workload`` (``gpu``: one GPU
each; ``mixed``: half with required pod anti-affinity on the hostname, half spread over the leaves,
as ``kwok_throughput``'s) are queued at once, then the scheduler runs until all are bound. Its
writer answers every bind at once and hands the bound pod back through the bound-pod watch's
handler, as the watch would, a loop turn later; Events cost nothing. What the set-up built is
frozen out of the garbage collector, as after the coordinator's first sync. Process CPU from the
first decision to the last bind, per bound pod (start-up excluded), and the process's RSS once the
last pod is bound (the benchmark's own pod bodies, ~4 MiB for 3,000, included); ``--tracemalloc N``
also prints the N source lines holding the most memory then (tracing slows the run ~3×).

    .venv/bin/python -m benchmarks.kwok_engine [--nodes 5000] [--pods 3000] [--workload gpu]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import sys
import time
import tracemalloc
from collections.abc import Mapping, Sequence
from typing import Any

import psutil

from benchmarks.kwok_pods import pod_body
from benchmarks.watch_events import _nodes
from common.kube import KubeClient
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.app.collector import settle
from coordinator.core.dra.model import ClaimAllocation
from coordinator.engine.loop import Scheduler
from coordinator.engine.ports import PodRef
from coordinator.engine.view import ClusterView
from coordinator.inventory.store import Inventory


class _Writer:
    """Binds at once; the bound pod reaches the inventory and the queue a loop turn later."""

    def __init__(self, sync: KubeSync, pods: Mapping[str, dict[str, Any]]) -> None:
        self._bound_pods = sync._reflectors[1]._handler  # the bound-pod watch's handler
        self._pods = pods
        self.scheduler: Scheduler | None = None

    async def allocate_claims(
        self, pod: PodRef, claims: Sequence[ClaimAllocation]
    ) -> tuple[ClaimAllocation, ...]:
        return tuple(claims)

    async def release_claims(self, pod: PodRef, claims: Sequence[ClaimAllocation]) -> None:
        return None

    async def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
        obj = copy.deepcopy(self._pods[pod.key])
        obj["metadata"].setdefault("annotations", {}).update(annotations)
        obj["spec"]["nodeName"] = node
        asyncio.get_running_loop().call_soon(self._seen, obj)

    def _seen(self, obj: dict[str, Any]) -> None:
        assert self.scheduler is not None
        self.scheduler.queue.delete(obj, gone=False)  # the pending watch: no longer pending
        self._bound_pods.apply("ADDED", obj)

    async def explain(self, pod: PodRef, message: str, *, nominated: str = "") -> bool:
        return False

    async def record_scheduled(self, pod: PodRef, message: str) -> None:
        return None

    async def event(
        self, pod: PodRef, *, reason: str, message: str, event_type: str = "Normal"
    ) -> None:
        return None

    async def evict(self, pod: PodRef, *, grace_period_s: int | None = None) -> None:
        return None


async def measure(nodes: int, pods: int, workload: str, top: int = 0) -> tuple[float, int, float]:
    """CPU ms per bound pod, how many were bound, and RSS (MiB) when the last was bound (and,
    with ``top``, what held the memory then, printed)."""
    inventory = Inventory()
    sync = KubeSync(KubeClient.__new__(KubeClient), inventory)  # handlers only: never run
    sync._reflectors[0]._handler.replace(_nodes(nodes))
    objs: dict[str, dict[str, Any]] = {}
    for i in range(pods):
        body = pod_body(f"p-{i:05d}", "topos", workload=workload, index=i, size=pods)
        body["metadata"].update(namespace="bench", uid=f"uid-{i}", resourceVersion="1")
        objs[f"bench/p-{i:05d}"] = body
    writer = _Writer(sync, objs)
    scheduler = Scheduler(view=ClusterView(inventory), writer=writer)
    writer.scheduler = scheduler
    scheduler.view.snapshot()  # the first snapshot is start-up, not measured
    settle()  # as the coordinator does after its first sync
    for body in objs.values():
        scheduler.queue.add(body)
    t0 = time.process_time()
    task = asyncio.create_task(scheduler.run())
    await scheduler.idle.wait()  # every pod tried (placed, or parked if it did not fit)
    await scheduler.binder.drain()
    await asyncio.sleep(0)  # the last binds seen
    cpu = time.process_time() - t0
    rss = psutil.Process().memory_info().rss / 2**20
    if top:
        _top(top)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return 1000 * cpu / max(1, scheduler.stats.bound), scheduler.stats.bound, rss


def _top(lines: int) -> None:
    stats = tracemalloc.take_snapshot().statistics("lineno")
    print(f"tracemalloc: {sum(s.size for s in stats) / 2**20:.1f} MiB traced; top {lines}:")
    for stat in stats[:lines]:
        frame = stat.traceback[0]
        where = f"{frame.filename}:{frame.lineno}"
        print(f"  {stat.size / 2**20:6.1f} MiB {stat.count:8d} blocks  {where}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=3000)
    ap.add_argument("--workload", choices=("gpu", "mixed"), default="gpu")
    ap.add_argument("--tracemalloc", type=int, default=0, metavar="N")
    args = ap.parse_args(argv)
    if args.tracemalloc:
        tracemalloc.start()
    ms, bound, rss = asyncio.run(measure(args.nodes, args.pods, args.workload, args.tracemalloc))
    print(
        f"{args.nodes} nodes, {args.workload}: {bound}/{args.pods} bound, "
        f"{ms:.2f} ms CPU per bound pod (decide, assume, bind, confirm; no HTTP), "
        f"RSS {rss:.0f} MiB when the last was bound"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
