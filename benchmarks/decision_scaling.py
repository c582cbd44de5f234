"""Decision latency and throughput of the pure scheduling core at 1,000, 5,000 and 10,000 nodes.

For each size, a leaf–spine cluster (32 nodes per leaf, 8 leaves per spine) of DGX H100 (40 %),
DGX A100 (30 %), 8×L40S PCIe boxes (25 %) and MIG-partitioned A100s (5 %) — hardware from the
built-in profiles — starts with about 40 % of its GPUs and MIG instances held by running pods
(random GPUs per node, seeded), then ``--pods`` pods of the synthetic trace mix (single pods:
1–8 GPUs, MIG, NUMA pinned, some naming a GPU model; gang members are left to
``benchmarks/gang_placement.py``) are decided one at a time, each followed by
``Snapshot.assume`` as the scheduler loop does. Timed per pod: wall and
CPU (``process_time``) for decide + assume. Throughput = pods decided per wall second (and per
CPU-second, steadier on a shared machine).

Side by side in the same run, on the same cluster and pods: Topos with
``percentageOfNodesToScore: 100`` (every node filtered and scored), Topos with the default
(kube-scheduler's adaptive percentage: 10 % of 5,000 nodes, at least 100), Topos with
``fastScheduling: {enabled: true, maxNodesToScore: 50}``, and the naive first-fit policy of the
simulator (same Kubernetes filters, no topology plugins, no scoring). Besides latency: pods/s of
the single-GPU pods alone (no MIG, NUMA or node affinity), the cost of the first pod of a new
shape (a single-GPU pod with a CPU request no pod had; not assumed), and what the placements left:
the mean placement score, and nodes left partly used (idle GPUs next to busy ones).

``--cliques`` makes 72 % of the nodes GB200 NVL72 trays (``gb200-nvl72``, 18 per
``nvidia.com/gpu.clique``) beside the same mix: the lone pods then go through ``CliqueKeep``'s
nodes-visited-first path. ``--policies adaptive,...`` runs only those arms (lines, no rows).

Run: ``.venv/bin/python -m benchmarks.decision_scaling [--sizes 1000,5000,10000] [--pods 400]
[--cliques] [--policies P,...]``; ``--json`` prints rows for ``benchmarks.run_all``.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from coordinator.core.framework.config import FastScheduling, SchedulerConfig
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement, PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.sim import build_nodes, cluster_shape, generate, parse_cluster
from coordinator.sim.baselines.perpod import baseline_framework
from coordinator.sim.pods import job_pods

_MIX = (("dgx-h100", 0.40), ("dgx-a100", 0.30), ("pcie-8x", 0.25), ("a100-mig", 0.05))
_CACHE: dict[str, NodeTopology] = {}
_CLIQUE_SHARE = 0.72  # --cliques: this share of the nodes are NVL72 trays
_UUID = "5d0c9a3e-7f21-4c8b-a6e4-0b9f3d2c1e77"


def topology_of(profile: str) -> NodeTopology:
    if profile not in _CACHE:
        _CACHE[profile] = discover_profile(profile, hostname=profile)
    return _CACHE[profile]


def cluster(n: int, *, cliques: bool = False) -> list[NodeInfo]:
    groups = []
    left = n
    if cliques:  # GB200 NVL72 racks: 18 trays per nvidia.com/gpu.clique
        racks = round(n * _CLIQUE_SHARE) // 18
        for r in range(racks):
            groups.append(
                f"  - {{profile: gb200-nvl72, count: 18, namePrefix: rack{r}, "
                f"labels: {{nvidia.com/gpu.clique: {_UUID}.{r}}}}}"
            )
        left -= racks * 18
    rest = left
    for i, (profile, share) in enumerate(_MIX):
        count = left if i == len(_MIX) - 1 else round(rest * share)
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
    single_ms: list[float]  # wall time of the single-GPU pods alone
    first_ms: list[float]  # first pod of a new shape (not assumed)
    mean_score: float
    partly_used: int  # nodes with both busy and idle whole GPUs after the run

    def pct(self, values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]

    def pcts(self, values: list[float]) -> str:
        return f"{self.pct(values, 50):.2f} / {self.pct(values, 99):.2f} ms"

    @property
    def throughput(self) -> float:
        return len(self.wall_ms) / (sum(self.wall_ms) / 1000) if self.wall_ms else 0.0

    @property
    def cpu_throughput(self) -> float:
        """Pods per CPU-second: steadier than wall time on a shared machine."""
        return len(self.cpu_ms) / (sum(self.cpu_ms) / 1000) if self.cpu_ms else 0.0

    @property
    def single_throughput(self) -> float:
        return len(self.single_ms) / (sum(self.single_ms) / 1000) if self.single_ms else 0.0


def is_single_gpu(pod: PodRequest) -> bool:
    return (
        pod.gpus == 1
        and not pod.mig
        and pod.numa_policy is None
        and pod.node_affinity is None
        and not pod.node_selector
    )


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
    single: list[float] = []
    scores: list[float] = []
    for pod in pods[:timed]:
        w0, c0 = time.perf_counter(), time.process_time()
        result = schedule_one(pod, snapshot, framework)
        if isinstance(result, Decision):
            snapshot.assume(pod, result.node, result.placement)
            scores.append(result.score)
        wall.append((time.perf_counter() - w0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        if is_single_gpu(pod):
            single.append(wall[-1])
    first: list[float] = []
    template = next(p for p in pods if is_single_gpu(p))
    for k in range(5):  # a CPU request no pod had: a pod class the memo has not seen
        requests = {**template.requests, "cpu": template.requests.get("cpu", 0) + 7 + k}
        fresh = dataclasses.replace(template, name=f"fresh-{k}", requests=requests)
        w0 = time.perf_counter()
        schedule_one(fresh, snapshot, framework)
        first.append((time.perf_counter() - w0) * 1000)
    partly = sum(
        1
        for n in snapshot.nodes
        if n.topology is not None and n.gpu_owner and n.free_whole_gpus > 0
    )
    mean = sum(scores) / len(scores) if scores else 0.0
    return Result(policy, len(nodes), wall, cpu, len(scores), busy, single, first, mean, partly)


def frameworks() -> list[tuple[str, Framework]]:
    fast = FastScheduling(enabled=True, max_nodes_to_score=50)
    return [
        ("exhaustive", build_framework(SchedulerConfig(percentage_of_nodes_to_score=100))),
        ("adaptive", build_framework()),
        ("fast-50", build_framework(SchedulerConfig(fast_scheduling=fast))),
        ("first-fit", baseline_framework("firstfit")),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,5000,10000")
    ap.add_argument("--pods", type=int, default=400, help="timed pods per size")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--json", action="store_true", help="print rows as JSON (for run_all)")
    ap.add_argument(
        "--cliques",
        action="store_true",
        help="72 %% of the nodes GB200 NVL72 trays, 18 per nvidia.com/gpu.clique",
    )
    ap.add_argument("--policies", default="", help="only these (comma-separated), e.g. adaptive")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    policies = [
        (name, fw)
        for name, fw in frameworks()
        if not args.policies or name in args.policies.split(",")
    ]
    rows: list[dict[str, Any]] = []
    for n in sizes:
        t0 = time.perf_counter()
        nodes, busy = prefill(cluster(n, cliques=args.cliques), args.seed)
        pods = pods_for(nodes, args.pods, args.seed)
        build_s = time.perf_counter() - t0
        results = {name: run(name, fw, nodes, pods, args.pods, busy) for name, fw in policies}
        for r in results.values():
            line = (
                f"{n:6d} nodes  {r.policy:10s}  wall p50 {r.pct(r.wall_ms, 50):6.2f}  "
                f"p99 {r.pct(r.wall_ms, 99):6.2f} ms  cpu p50 {r.pct(r.cpu_ms, 50):6.2f}  "
                f"p99 {r.pct(r.cpu_ms, 99):6.2f} ms  {r.throughput:6.0f} pods/s "
                f"({r.cpu_throughput:5.0f}/CPU-s)  "
                f"single-GPU {r.single_throughput:6.0f} pods/s  "
                f"new shape {r.pct(r.first_ms, 50):6.2f} ms  placed {r.placed}/{len(r.wall_ms)}  "
                f"score {r.mean_score:6.1f}  partly used {r.partly_used}"
            )
            if not args.json:
                print(line, flush=True)
        if len(results) < len(frameworks()):  # --policies: lines only
            continue
        full, adaptive = results["exhaustive"], results["adaptive"]
        base = results["first-fit"]
        gpus = sum(x.allocatable.get(GPU_RESOURCE, 0) for x in nodes)

        def row(
            case: str,
            figure: str,
            value: Any,
            full: Result = full,
            adaptive: Result = adaptive,
            base: Result = base,
        ) -> dict[str, Any]:
            return {
                "case": case,
                "figure": figure,
                "topos": f"{value(adaptive)} (every node: {value(full)})",
                "baseline": f"{value(base)} (first-fit)",
                "goal": "",
            }

        rows.append(
            row(
                f"{n:,} nodes ({gpus:,} GPUs), {len(adaptive.wall_ms)} pods",
                "decision p50 / p99 (wall)",
                lambda r: r.pcts(r.wall_ms),
            )
        )
        rows.append(row(f"{n:,} nodes", "decision p50 / p99 (CPU)", lambda r: r.pcts(r.cpu_ms)))
        rows.append(
            row(
                f"{n:,} nodes",
                "throughput (decide + assume, one core)",
                lambda r: f"{r.throughput:,.0f} pods/s ({r.cpu_throughput:,.0f}/CPU-s)",
            )
        )
        rows.append(
            row(
                f"{n:,} nodes",
                "single-GPU pods",
                lambda r: f"{r.single_throughput:,.0f} pods/s",
            )
        )
        rows.append(
            row(
                f"{n:,} nodes",
                "first pod of a new shape",
                lambda r: f"{r.pct(r.first_ms, 50):.1f} ms",
            )
        )
        if not args.json:
            print(f"      (cluster + pods built in {build_s:.1f} s; prefilled {busy} GPUs)")
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"rows": rows, "notes": [f"load average {load:.1f} during the run"]}))
    else:
        print(f"load average {load:.1f} (wall figures include time other processes held the CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
