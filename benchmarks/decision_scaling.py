"""Decision latency and throughput of the pure scheduling core at 100, 1,000 and 5,000 nodes.

For each size, a leaf–spine cluster (32 nodes per leaf, 8 leaves per spine) of DGX H100 (40 %),
DGX A100 (30 %), 8×L40S PCIe boxes (25 %) and MIG-partitioned A100s (5 %) — hardware from the
built-in profiles — starts with about 40 % of its GPUs and MIG instances held by running pods
(random GPUs per node, seeded), then ``--pods`` pods of the synthetic trace mix (single pods:
1–8 GPUs, MIG, NUMA pinned, some naming a GPU model; gang members are left to
``benchmarks/gang_placement.py``) are decided one at a time, each followed by
``Snapshot.assume`` as the scheduler loop does. Timed per pod: wall and
CPU (``process_time``) for decide + assume. Throughput = pods decided per wall second.

Baseline in the same run, on the same cluster and pods: the naive first-fit policy of the
simulator (same framework, same Kubernetes filters, no topology plugins, no scoring) — what a
decision costs without the topology work.

Run: ``.venv/bin/python -m benchmarks.decision_scaling [--sizes 100,1000,5000] [--pods 400]``;
``--json`` prints rows for ``benchmarks.run_all``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.devices import discover_profile
from common.model import NodeTopology
from common.podkeys import GPU_RESOURCE
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement, PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.sim import build_nodes, cluster_shape, generate, parse_cluster
from coordinator.sim.pods import job_pods
from coordinator.sim.policies import baseline_framework

_MIX = (("dgx-h100", 0.40), ("dgx-a100", 0.30), ("pcie-8x", 0.25), ("a100-mig", 0.05))
_CACHE: dict[str, NodeTopology] = {}


def topology_of(profile: str) -> NodeTopology:
    if profile not in _CACHE:
        _CACHE[profile] = discover_profile(profile, hostname=profile)
    return _CACHE[profile]


def cluster(n: int) -> list[NodeInfo]:
    groups = []
    left = n
    for i, (profile, share) in enumerate(_MIX):
        count = left if i == len(_MIX) - 1 else round(n * share)
        left -= count
        if count:
            groups.append(f"  - {{profile: {profile}, count: {count}}}")
    text = "layout: {nodesPerLeaf: 32, leavesPerSpine: 8}\nnodes:\n" + "\n".join(groups)
    return build_nodes(parse_cluster(text), topology_of)


def pods_for(nodes: Sequence[NodeInfo], count: int, seed: int) -> list[PodRequest]:
    products = {n.labels.get("topos.io/gpu.product", "") for n in nodes}
    jobs = generate(cluster_shape(nodes, jobs=count * 2, seed=seed))
    out: list[PodRequest] = []
    for job in jobs:
        if job.gang_size == 1:
            out.extend(job_pods(job, products))
    return out


@dataclass
class Result:
    policy: str
    nodes: int
    wall_ms: list[float]
    cpu_ms: list[float]
    placed: int
    prefill_gpus: int

    def pct(self, values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]

    def pcts(self, values: list[float]) -> str:
        return f"{self.pct(values, 50):.2f} / {self.pct(values, 99):.2f} ms"

    @property
    def throughput(self) -> float:
        return len(self.wall_ms) / (sum(self.wall_ms) / 1000) if self.wall_ms else 0.0


def prefill(nodes: list[NodeInfo], seed: int, share: float = 0.4) -> tuple[list[NodeInfo], int]:
    """Nodes with about ``share`` of their GPUs and MIG instances already held by running pods
    (random GPUs, seeded: some nodes full, some empty, most partly used)."""
    rng = random.Random(seed)
    out: list[NodeInfo] = []
    busy = 0
    for node in nodes:
        topo = node.topology
        if topo is None:
            out.append(node)
            continue
        whole = [g.index for g in topo.gpus if not g.mig_enabled]
        mig = [(g.index, i.gi_id) for g in topo.gpus if g.mig_enabled for i in g.mig_instances]
        take = sum(1 for _ in whole if rng.random() < share)
        gpus = tuple(sorted(rng.sample(whole, take)))
        migs = tuple(m for m in mig if rng.random() < share)
        pods = []
        if gpus or migs:
            requests = {GPU_RESOURCE: len(gpus), "cpu": 4000 * len(gpus), "pods": 1}
            placement = Placement(gpus=gpus, mig=migs)
            pods.append(
                PodInfo(namespace="fill", name=node.name, requests=requests, placement=placement)
            )
        busy += len(gpus)
        out.append(node.rebuild(pods))
    return out, busy


def run(
    policy: str,
    framework: Framework,
    nodes: list[NodeInfo],
    pods: list[PodRequest],
    timed: int,
    busy: int,
) -> Result:
    snapshot = Snapshot(nodes)
    wall: list[float] = []
    cpu: list[float] = []
    placed = 0
    for pod in pods[:timed]:
        w0, c0 = time.perf_counter(), time.process_time()
        result = schedule_one(pod, snapshot, framework)
        if isinstance(result, Decision):
            snapshot.assume(pod, result.node, result.placement)
            placed += 1
        wall.append((time.perf_counter() - w0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return Result(policy, len(nodes), wall, cpu, placed, busy)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000,5000")
    ap.add_argument("--pods", type=int, default=400, help="timed pods per size")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--json", action="store_true", help="print rows as JSON (for run_all)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    topos = build_framework()
    naive = baseline_framework("firstfit")
    rows: list[dict[str, Any]] = []
    for n in sizes:
        t0 = time.perf_counter()
        nodes, busy = prefill(cluster(n), args.seed)
        pods = pods_for(nodes, args.pods, args.seed)
        build_s = time.perf_counter() - t0
        results = [
            run("topos", topos, nodes, pods, args.pods, busy),
            run("first-fit", naive, nodes, pods, args.pods, busy),
        ]
        for r in results:
            line = (
                f"{n:5d} nodes  {r.policy:9s}  wall p50 {r.pct(r.wall_ms, 50):7.2f}  "
                f"p99 {r.pct(r.wall_ms, 99):7.2f} ms  cpu p50 {r.pct(r.cpu_ms, 50):7.2f}  "
                f"p99 {r.pct(r.cpu_ms, 99):7.2f} ms  {r.throughput:7.0f} pods/s  "
                f"placed {r.placed}/{len(r.wall_ms)}"
            )
            if not args.json:
                print(line, flush=True)
        t, b = results
        gpus = sum(x.allocatable.get(GPU_RESOURCE, 0) for x in nodes)
        wall = "decision p50 / p99 (wall)"
        rows.append(
            {
                "case": f"{n:,} nodes ({gpus:,} GPUs), {len(t.wall_ms)} pods",
                "figure": wall,
                "topos": t.pcts(t.wall_ms),
                "baseline": b.pcts(b.wall_ms) + " (first-fit)",
                "goal": "",
            }
        )
        rows.append(
            {
                "case": f"{n:,} nodes",
                "figure": "decision p50 / p99 (CPU)",
                "topos": t.pcts(t.cpu_ms),
                "baseline": b.pcts(b.cpu_ms) + " (first-fit)",
                "goal": "",
            }
        )
        rows.append(
            {
                "case": f"{n:,} nodes",
                "figure": "throughput (decide + assume, one core)",
                "topos": f"{t.throughput:,.0f} pods/s",
                "baseline": f"{b.throughput:,.0f} pods/s (first-fit)",
                "goal": "",
            }
        )
        if not args.json:
            print(
                f"      (cluster + pods built in {build_s:.1f} s; prefilled {t.prefill_gpus} GPUs)"
            )
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"rows": rows, "notes": [f"load average {load:.1f} during the run"]}))
    else:
        print(f"load average {load:.1f} (wall figures include time other processes held the CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
