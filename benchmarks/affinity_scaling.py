"""Pods with required pod anti-affinity and topology spread constraints in the pure core, on
kube-scheduler's scheduler_perf shapes, at 1,000 and 5,000 nodes.

kube's ``test/integration/scheduler_perf`` cases, scaled with the node count ``n``:

- ``anti-affinity`` (``SchedulingPodAntiAffinity/5000Nodes_2000Pods``; kube's CI threshold
  60 pods/s): plain nodes (4 CPU, 32 GiB, 110 pods); ``n/5`` pods already running in namespace
  ``sched-0``, then ``2n/5`` pods in ``sched-1`` decided one at a time. Every pod is labelled
  ``color: green`` and refuses, on ``kubernetes.io/hostname``, any pod labelled so in either
  namespace: each lands on a node of its own.
- ``spread-zone`` (``TopologySpreading/5000Nodes_5000Pods``; threshold 460 pods/s): nodes in
  three zones, ``n`` unlabelled pods already running, then ``n`` pods labelled ``color: blue``
  with ``maxSkew: 5`` on ``topology.kubernetes.io/zone`` (DoNotSchedule).
- ``spread-host``: as ``spread-zone`` with ``maxSkew: 1`` on the zone *and* on the hostname.

Each pod is decided by ``schedule_one`` and held with ``Snapshot.assume``, as the scheduler loop
does. Side by side in the same run, on the same cluster and pods: ``scan`` — the inter-pod
plugins walking the snapshot's pods in every PreFilter (the code before the indexes, kept in
``coordinator/sim/baselines/scan.py``) — and ``indexed`` — the plugins as shipped, reading
per-selector counts kept current by the snapshot. Both with the default scheduling settings
(kube's adaptive ``percentageOfNodesToScore``). Printed: pods/s (wall and per CPU-second),
p50/p99 decision, whether both placed every pod on the same nodes.

Run: ``.venv/bin/python -m benchmarks.affinity_scaling [--sizes 1000,5000] [--cases ...]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement, PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.sim.baselines.scan import scan_framework

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
_ALLOCATABLE = {"cpu": 4000, "memory": 32 * 2**30, "pods": 110}
_CONTAINER = {
    "name": "pause",
    "image": "registry.k8s.io/pause:3.10",
    "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}},
}


def _pod(
    name: str, namespace: str, labels: dict[str, str], spec: Mapping[str, object]
) -> PodRequest:
    obj = {
        "metadata": {"name": name, "namespace": namespace, "uid": f"{namespace}-{name}"},
        "spec": {"schedulerName": "topos", "containers": [_CONTAINER], **spec},
    }
    if labels:
        obj["metadata"]["labels"] = labels  # type: ignore[index]
    parsed = parse_pod(obj)
    if not isinstance(parsed, PodRequest):
        raise SystemExit(f"bad benchmark pod: {parsed}")
    return parsed


def anti_affinity_pod(name: str, namespace: str) -> PodRequest:
    term = {
        "labelSelector": {"matchLabels": {"color": "green"}},
        "topologyKey": HOST,
        "namespaces": ["sched-0", "sched-1"],
    }
    spec = {
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    }
    return _pod(name, namespace, {"color": "green"}, spec)


def spread_pod(name: str, keys: Sequence[tuple[str, int]]) -> PodRequest:
    constraints = [
        {
            "maxSkew": skew,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"color": "blue"}},
        }
        for key, skew in keys
    ]
    return _pod(name, "default", {"color": "blue"}, {"topologySpreadConstraints": constraints})


@dataclass(frozen=True)
class Case:
    name: str
    nodes: list[NodeInfo]
    pods: list[PodRequest]


def _nodes(n: int, running: Callable[[int], list[PodInfo]]) -> list[NodeInfo]:
    return [
        NodeInfo.build(
            f"node-{i:05d}",
            labels={HOST: f"node-{i:05d}", ZONE: f"moon-{i % 3 + 1}"},
            allocatable=_ALLOCATABLE,
            pods=running(i),
        )
        for i in range(n)
    ]


def anti_affinity_case(n: int) -> Case:
    first = n // 5
    held = [
        PodInfo.from_request(anti_affinity_pod(f"init-{i}", "sched-0"), Placement())
        for i in range(first)
    ]
    # kube spreads its init pods by the same rule: one per node (here every fifth node).
    nodes = _nodes(n, lambda i: [held[i // 5]] if i % 5 == 0 and i // 5 < first else [])
    pods = [anti_affinity_pod(f"pod-{i}", "sched-1") for i in range(2 * n // 5)]
    return Case("anti-affinity", nodes, pods)


def _plain(i: int) -> list[PodInfo]:
    return [
        PodInfo(namespace="default", name=f"init-{i}", requests={"cpu": 100, "memory": 500 * 2**20})
    ]


def spread_zone_case(n: int) -> Case:
    pods = [spread_pod(f"pod-{i}", [(ZONE, 5)]) for i in range(n)]
    return Case("spread-zone", _nodes(n, _plain), pods)


def spread_host_case(n: int) -> Case:
    pods = [spread_pod(f"pod-{i}", [(ZONE, 1), (HOST, 1)]) for i in range(n)]
    return Case("spread-host", _nodes(n, _plain), pods)


CASES: dict[str, Callable[[int], Case]] = {
    "anti-affinity": anti_affinity_case,
    "spread-zone": spread_zone_case,
    "spread-host": spread_host_case,
}


@dataclass
class Run:
    wall_ms: list[float]
    cpu_ms: list[float]
    placed: list[str]
    check: str = ""

    def pct(self, values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]

    @property
    def throughput(self) -> float:
        return len(self.wall_ms) / (sum(self.wall_ms) / 1000)

    @property
    def cpu_throughput(self) -> float:
        return len(self.cpu_ms) / (sum(self.cpu_ms) / 1000)


def run(case: Case, framework: Framework, limit: int) -> Run:
    snapshot = Snapshot(case.nodes)
    out = Run([], [], [])
    for pod in case.pods[:limit]:
        w0, c0 = time.perf_counter(), time.process_time()
        result = schedule_one(pod, snapshot, framework)
        if isinstance(result, Decision):
            snapshot.assume(pod, result.node, result.placement)
        out.wall_ms.append((time.perf_counter() - w0) * 1000)
        out.cpu_ms.append((time.process_time() - c0) * 1000)
        out.placed.append(result.node if isinstance(result, Decision) else "")
    out.check = check(case, snapshot)
    return out


def check(case: Case, snapshot: Snapshot) -> str:
    """What a user would verify: anti-affine pods never share a node; spread skew held."""
    if case.name == "anti-affinity":
        shared = sum(
            1 for n in snapshot.nodes if sum(p.labels.get("color") == "green" for p in n.pods) > 1
        )
        return f"nodes with two anti-affine pods: {shared}"
    out = []
    for key in (ZONE, HOST):
        per: dict[str, int] = {n.labels[key]: 0 for n in snapshot.nodes}
        for n in snapshot.nodes:
            per[n.labels[key]] += sum(p.labels.get("color") == "blue" for p in n.pods)
        out.append(f"{key.split('/')[-1]} skew {max(per.values()) - min(per.values())}")
    return ", ".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,5000")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--pods", type=int, default=0, help="at most this many pods per case (0: all)")
    ap.add_argument("--only", choices=("scan", "indexed"), help="run one code path (profiling)")
    args = ap.parse_args(argv)
    paths: list[tuple[str, Callable[[], Framework]]] = [
        ("scan", scan_framework),
        ("indexed", build_framework),
    ]
    if args.only:
        paths = [p for p in paths if p[0] == args.only]
    for n in (int(s) for s in args.sizes.split(",") if s.strip()):
        for name in args.cases.split(","):
            results = {}
            for label, make in paths:  # a fresh cluster and framework each (no warm memo)
                case = CASES[name](n)
                results[label] = run(case, make(), args.pods or len(case.pods))
            for label, r in results.items():
                unplaced = r.placed.count("")
                print(
                    f"{n:6d} nodes  {case.name:13s} {len(r.wall_ms):5d} pods  {label:8s} "
                    f"{r.throughput:7.0f} pods/s ({r.cpu_throughput:6.0f}/CPU-s)  "
                    f"p50 {r.pct(r.wall_ms, 50):6.2f}  p99 {r.pct(r.wall_ms, 99):6.2f} ms  "
                    f"{r.check}" + (f"  unplaced {unplaced}" if unplaced else ""),
                    flush=True,
                )
            if len(results) == 2:
                scan, indexed = results["scan"], results["indexed"]
                same = scan.placed == indexed.placed
                print(
                    f"{'':6s}        speed-up {indexed.cpu_throughput / scan.cpu_throughput:5.1f}×"
                    f" (CPU)  same placements: {'yes' if same else 'NO'}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
