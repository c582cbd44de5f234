"""The fixed cost of a scheduling cycle where a pod has one possible node. In one process, the
core alone: ``schedule_one`` then ``Snapshot.assume`` per pod, no engine, HTTP or Events.

Two shapes, as scheduler_perf's: ``one-node`` — ``--pods`` plain pods (the pause container, no
requests) onto one node of 4 CPUs, 32 GiB and 90,000 pods (SchedulingWhileGated's); ``daemonset``
— ``--pods`` pods each pinned by ``matchFields`` ``metadata.name`` to one of 500 such nodes in
turn (SchedulingDaemonset's). CPU per pod, median of ``--repeat`` runs.

    .venv/bin/python -m benchmarks.cycle_fixed_cost [--pods 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot

_ALLOCATABLE = {"cpu": 4000, "memory": 32 * 2**30, "pods": 90_000}


def _pod(i: int, node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "pause", "image": "pause:3.10.1"}]}
    if node is not None:
        field = {"key": "metadata.name", "operator": "In", "values": [node]}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [field]}]
                }
            }
        }
    meta = {"name": f"p-{i}", "namespace": "bench", "uid": f"u-{i}", "labels": {"app": "bench"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def measure(shape: str, pods: int) -> float:
    """CPU microseconds per pod, cycle and assume."""
    count = 1 if shape == "one-node" else 500
    names = [f"node-{i:03d}" for i in range(count)]
    snapshot = Snapshot([NodeInfo.build(n, allocatable=_ALLOCATABLE) for n in names])
    framework = build_framework()
    requests: list[PodRequest] = []
    for i in range(pods):
        parsed = parse_pod(_pod(i, names[i % count] if shape == "daemonset" else None))
        assert isinstance(parsed, PodRequest), parsed
        requests.append(parsed)
    t0 = time.process_time()
    for request in requests:
        decision = schedule_one(request, snapshot, framework)
        assert isinstance(decision, Decision), decision
        snapshot.assume(request, decision.node, decision.placement)
    return 1e6 * (time.process_time() - t0) / pods


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    runs: dict[str, list[float]] = {"one-node": [], "daemonset": []}
    for _ in range(args.repeat):
        for shape, got in runs.items():
            got.append(measure(shape, args.pods))
    for shape, us in runs.items():
        print(
            f"{shape:>9}, {args.pods} pods: {statistics.median(us):.1f} us CPU per pod, cycle "
            f"and assume (median; {', '.join(f'{u:.1f}' for u in us)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
