"""What the scheduler's view costs per pod on one node crowded with pods while binds complete out
of order and bound pods leave — SchedulingWhileGated's shape (`--leave 3`: a bound pod deleted
for every third pod scheduled) and a DaemonSet's (`--leave 0`). In one process, the view alone: no
cycle, engine, HTTP or Events.

One node holding ``--bound`` pods; then per pod: a snapshot (as each attempt takes), the pod
assumed there, and, once ``--in-flight`` binds are under way, the bind of one of them (chosen at
random: binds finish out of order) seen on the inventory; every ``--leave``-th pod, the oldest
bound pod deleted. Process CPU per pod, median of ``--repeat`` runs; the last snapshot is checked
against a view built afresh (same nodes, pods and requests).

    .venv/bin/python -m benchmarks.view_churn [--bound 2000] [--pods 3000] [--in-flight 32]
        [--leave 3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.snapshot.podinfo import Placement
from coordinator.engine.view import ClusterView
from coordinator.inventory.state import BoundPod, KubeNode
from coordinator.inventory.store import Inventory
from coordinator.inventory.translate import bound_pod

NODE = "scheduler-perf-node"


def _obj(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1"}]},
    }


def _bound(obj: dict[str, Any]) -> BoundPod:
    seen = bound_pod({**obj, "spec": {**obj["spec"], "nodeName": NODE}})
    assert seen is not None
    return seen


def measure(bound: int, pods: int, in_flight: int, leave: int, seed: int) -> float:
    """CPU µs per pod scheduled."""
    rng = random.Random(seed)
    inventory = Inventory()
    inventory.upsert_node(KubeNode(name=NODE, allocatable={"cpu": 4000, "pods": 90_000}))
    on_node: deque[str] = deque()
    for i in range(bound):
        obj = _obj(f"b-{i:05d}")
        inventory.upsert_pod(_bound(obj))
        on_node.append(obj["metadata"]["uid"])
    view = ClusterView(inventory)
    view.snapshot()
    requests: list[tuple[PodRequest, dict[str, Any]]] = []
    for i in range(pods):
        obj = _obj(f"p-{i:05d}")
        request = parse_pod(obj)
        assert isinstance(request, PodRequest)
        requests.append((request, obj))
    flying: list[dict[str, Any]] = []
    began = time.process_time()
    for i, (request, obj) in enumerate(requests):
        view.snapshot()
        view.assume(request, NODE, Placement())
        view.bind_done(request.uid)
        flying.append(obj)
        if len(flying) > in_flight:
            seen = flying.pop(rng.randrange(len(flying)))
            inventory.upsert_pod(_bound(seen))
            on_node.append(seen["metadata"]["uid"])
        if leave and i % leave == 0 and on_node:
            inventory.delete_pod(on_node.popleft())
    snap = view.snapshot()
    spent = time.process_time() - began
    fresh = ClusterView(inventory)
    for obj in flying:
        request = parse_pod(obj)
        assert isinstance(request, PodRequest)
        fresh.assume(request, NODE, Placement())
    assert snap.by_name[NODE] == fresh.snapshot().by_name[NODE]
    return spent / pods * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bound", type=int, default=2000)
    ap.add_argument("--pods", type=int, default=3000)
    ap.add_argument("--in-flight", type=int, default=32)
    ap.add_argument("--leave", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    runs = [
        measure(args.bound, args.pods, args.in_flight, args.leave, seed)
        for seed in range(args.repeat)
    ]
    print(
        f"{args.bound} bound + {args.pods} pods onto one node, {args.in_flight} binds in flight, "
        f"a pod leaving every {args.leave or 'never'}: {statistics.median(runs):.1f} us CPU per "
        f"pod (median; {', '.join(f'{r:.1f}' for r in runs)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
