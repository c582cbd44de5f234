"""Does a crowd of scheduling-gated pods cost the pods being scheduled anything? In one process.

scheduler_perf's gated cases (SchedulingWhileGated, SchedulingGatedPodsWithPodAffinityImpact-
ForThroughput) put thousands of gated pods in the queue, then time ungated pods onto one node.
Here: the one node of their template (``node-with-name.yaml``: 4 CPUs, 32 GiB, 90,000 pods),
``--gated`` pods of ``gated-pod-with-pod-affinity.yaml`` queued and tried first (each is parked,
as kube's PreEnqueue keeps it out), then ``--pods`` pods of ``pod-with-label.yaml`` queued and
scheduled until all are bound, one arriving per loop turn, through the engine's scheduler with
``kwok_engine``'s writer (binds answered at once, the bound pod handed to the bound-pod watch's
handler a loop turn later; no HTTP, JSON or Events).
Process CPU per bound pod with no gated pods and with ``--gated``, alternated ``--repeat``
times, median of each.

    .venv/bin/python -m benchmarks.gated_engine [--gated 1000] [--pods 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.kwok_engine import _Writer
from common.kube import KubeClient
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.app.collector import settle
from coordinator.engine.loop import Scheduler
from coordinator.engine.view import ClusterView
from coordinator.inventory.store import Inventory

NODE = "scheduler-perf-node"
LABELS = {"app": "scheduler-perf"}


def _node() -> dict[str, Any]:
    cap = {"pods": "90000", "cpu": "4", "memory": "32Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "uid": "node-uid",
            "resourceVersion": "1",
            "labels": {"kubernetes.io/hostname": NODE},
        },
        "spec": {},
        "status": {
            "capacity": cap,
            "allocatable": dict(cap),
            "conditions": [{"type": "Ready", "status": "True"}],
            "phase": "Running",
        },
    }


def _pod(name: str, *, gated: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"image": "registry.k8s.io/pause:3.10.1", "name": "pause"}],
    }
    if gated:
        term = {"labelSelector": {"matchLabels": LABELS}, "topologyKey": "kubernetes.io/hostname"}
        spec["affinity"] = {
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
        spec["schedulingGates"] = [{"name": "scheduling-gate-1"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-12-01T06:00:00Z",
            "labels": dict(LABELS),
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


async def measure(gated: int, pods: int) -> float:
    """CPU ms per bound pod of ``pods`` ungated pods, ``gated`` gated ones queued first."""
    inventory = Inventory()
    sync = KubeSync(KubeClient.__new__(KubeClient), inventory)  # handlers only: never run
    sync._reflectors[0]._handler.replace([_node()])
    objs = {f"bench/p-{i:05d}": _pod(f"p-{i:05d}", gated=False) for i in range(pods)}
    writer = _Writer(sync, objs)
    scheduler = Scheduler(view=ClusterView(inventory), writer=writer)
    writer.scheduler = scheduler
    scheduler.view.snapshot()
    settle()
    task = asyncio.create_task(scheduler.run())
    for i in range(gated):
        scheduler.queue.add(_pod(f"g-{i:05d}", gated=True))
    await scheduler.idle.wait()  # every gated pod tried and parked
    assert scheduler.stats.invalid == gated, scheduler.stats
    t0 = time.process_time()
    for body in objs.values():
        scheduler.queue.add(body)
        await asyncio.sleep(0)  # arriving one by one, as from the pending-pod watch
    while scheduler.stats.bound < pods:
        await scheduler.idle.wait()  # every pod tried
        await scheduler.binder.drain()
        await asyncio.sleep(0)  # the last binds seen
    cpu = time.process_time() - t0
    assert scheduler.stats.bound == pods, scheduler.stats
    assert scheduler.stats.invalid == gated, scheduler.stats
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return 1000 * cpu / pods


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gated", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    runs: dict[int, list[float]] = {0: [], args.gated: []}
    for _ in range(args.repeat):
        for g in runs:
            runs[g].append(asyncio.run(measure(g, args.pods)))
    for g, ms in runs.items():
        print(
            f"{g:>6} gated, {args.pods} pods onto one node: "
            f"{statistics.median(ms):.3f} ms CPU per bound pod (median; "
            f"{', '.join(f'{m:.3f}' for m in ms)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
