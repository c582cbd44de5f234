"""CPU the scheduler's view spends per pod when every pod lands on one node (scheduler_perf's
SchedulingDaemonset), with binds in flight.

In one process, no API server: ``--others`` plain nodes and the one node every pod names; then
per pod, as the scheduler and the watches go in the real run: the snapshot taken, the pod assumed
on the node and its bind done; ``--lag`` pods later its bind is seen on the bound-pod watch (the
inventory shows it, the assumption ends), and ``--lag`` pods after that it starts (Running: an
in-place change). Timed: process CPU per pod of all of that (the pods' parsing excluded), and the
same with a view built afresh for comparison (``--afresh``, slow: it walks every pod every time).

    .venv/bin/python -m benchmarks.view_one_node [--pods 1000] [--others 500] [--lag 100]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.snapshot.podinfo import Placement
from coordinator.engine.view import ClusterView
from coordinator.inventory.state import BoundPod, KubeNode
from coordinator.inventory.store import Inventory
from coordinator.inventory.translate import bound_pod

NODE = "scheduler-perf-node"


def _pod(i: int) -> dict[str, Any]:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"daemonset-{i}", "namespace": "ns", "uid": f"uid-{i}"},
        "spec": {
            "schedulerName": "topos",
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            },
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1"}],
        },
    }


def _bound(obj: dict[str, Any], *, running: bool) -> BoundPod:
    status = {"phase": "Running", "startTime": "2026-12-01T02:00:00Z"} if running else {}
    seen = bound_pod({**obj, "spec": {**obj["spec"], "nodeName": NODE}, "status": status})
    assert seen is not None
    return seen


def measure(pods: int, others: int, lag: int) -> float:
    """CPU µs per pod of the view: snapshot, assume, bind done, bind seen, started."""
    inventory = Inventory()
    allocatable = {"cpu": 4000, "memory": 32 << 30, "pods": 110}
    for i in range(others):
        inventory.upsert_node(KubeNode(name=f"node-{i:05d}", labels={}, allocatable=allocatable))
    inventory.upsert_node(
        KubeNode(name=NODE, labels={}, allocatable={"cpu": 10**6, "memory": 1 << 50, "pods": 10**6})
    )
    objs = [_pod(i) for i in range(pods)]
    requests: list[PodRequest] = []
    for obj in objs:
        request = parse_pod(obj)
        assert isinstance(request, PodRequest)
        requests.append(request)
    seen = [_bound(o, running=False) for o in objs]
    started = [_bound(o, running=True) for o in objs]
    view = ClusterView(inventory)
    view.snapshot()
    begin = time.process_time()
    for i in range(pods + 2 * lag):
        if i < pods:
            view.snapshot()
            view.assume(requests[i], NODE, Placement())
            view.bind_done(requests[i].uid)
        if 0 <= i - lag < pods:
            inventory.upsert_pod(seen[i - lag])
        if 0 <= i - 2 * lag < pods:
            inventory.upsert_pod(started[i - 2 * lag])
    view.snapshot()
    spent = time.process_time() - begin
    snap = view.snapshot()
    assert len(snap.by_name[NODE].pods) == pods, len(snap.by_name[NODE].pods)
    assert view.assumed_count == 0
    return spent / pods * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--others", type=int, default=500)
    ap.add_argument("--lag", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    runs = sorted(measure(args.pods, args.others, args.lag) for _ in range(args.repeat))
    print(
        f"view, {args.pods} pods onto one node ({args.others} others), {args.lag} binds in flight: "
        f"{runs[len(runs) // 2]:.1f} µs CPU per pod (median of {args.repeat}; "
        f"{', '.join(f'{r:.1f}' for r in runs)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
