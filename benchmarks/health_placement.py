"""Health-aware against health-blind placement on one trace, same cluster, same jobs, same run
(``coordinator.sim`` on the production engine; docs/health.md, "Placement").

The cluster: 48 nodes in 6 leaves of 8 — DGX-1 V100s (24: direct NVLink, hybrid cube-mesh) and
DGX H100s (24: NVSwitch). Faults, seeded, in one of two modes:

- ``midrun`` (default): while the trace runs (``coordinator/sim/faults.py``), on a quarter of the
  nodes one GPU's NVLink degrades at a random time (2,341 CRC errors in 10 min, as the agent
  reports it: on a DGX-1 its port to its widest NVLink peer, on a DGX H100 its port to an
  NVSwitch, which slows every pair of that GPU); half of those GPUs fail 0.5–4 h later (XID 79),
  and on 5 % of the nodes a GPU fails with no warning. A failed GPU fails the jobs on it (they
  start over: their work is lost); a link that degrades slows the rest of the jobs running over
  it.
- ``static``: on a quarter of the nodes one NVLink is degraded from the start, nothing fails.

Both runs pay for the hardware as it is: a multi-GPU job over a degraded pair runs as if that
pair were its fallback class (``NODE``/``SYS``) under the cost model
(``coordinator/sim/costmodel.py``: NV 1.0, NODE 1.25, SYS 1.4). The health-blind run's scheduler
is given the topologies without the agent's verdicts (``ReplaySettings.health_blind``); a failed
GPU it sees too (the device plugin reports it).

Reported per seed and policy: multi-GPU jobs and those that ran over a degraded link, JCT mean
and p95, mean wait, jobs a GPU failed under, running jobs a link degraded under, GPU-hours lost
to restarts (failures and preemptions), fragmentation, gangs inside one leaf; then the JCT
difference summed over jobs, split into waiting and running, and how much of it the 10 largest
job differences make.

Run: ``.venv/bin/python -m benchmarks.health_placement [--jobs 400] [--seeds 7,11,13]
[--mode midrun|static]``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence

import msgspec

from agent.devices import discover_profile
from common.linkhealth import degraded_pairs
from common.model import GpuHealth, NodeTopology, NvLinkHealth
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.sim import (
    ReplaySettings,
    Simulator,
    build_nodes,
    cluster_shape,
    generate,
    make_policy,
    parse_cluster,
)
from coordinator.sim.faults import Fault, random_faults
from coordinator.sim.metrics import RunResult
from coordinator.sim.report import format_duration

CLUSTER = """
name: health-48
layout: {nodesPerLeaf: 8, leavesPerSpine: 3}
nodes:
  - {profile: dgx1-v100, count: 24}
  - {profile: dgx-h100, count: 24}
"""
REASON = "NVLink 0 degraded: 2,341 CRC errors in 10 min"


def _sick(topology: NodeTopology, rng: random.Random) -> NodeTopology:
    """``topology`` with one NVLink degraded, as the agent would report it."""
    gpus = list(topology.gpus)
    if topology.nvswitch:
        i, peer = rng.randrange(len(gpus)), None
    else:
        pairs = [
            (i, j)
            for i in range(len(gpus))
            for j in range(i + 1, len(gpus))
            if topology.link(i, j).nvlinks >= 2
        ]
        i, j = rng.choice(pairs)
        peer = gpus[j].pci_bus_id
    port = NvLinkHealth(
        link=0, peer_bus_id=peer, status="degraded", reason=REASON, crc_in_window=2341
    )
    health = GpuHealth(nvlinks=(port,), status="degraded", reasons=(REASON,))
    gpus[i] = msgspec.structs.replace(gpus[i], health=health)
    return msgspec.structs.replace(topology, gpus=tuple(gpus))


def inject(nodes: Sequence[NodeInfo], share: float, seed: int) -> list[NodeInfo]:
    rng = random.Random(seed)
    out = []
    for n in nodes:
        if n.topology is not None and rng.random() < share:
            n = NodeInfo.build(
                n.name, labels=n.labels, allocatable=n.allocatable, topology=_sick(n.topology, rng)
            )
        out.append(n)
    return out


def on_degraded(result: RunResult) -> tuple[int, int, float]:
    """(multi-GPU jobs, of those on a degraded pair, their mean stretch)."""
    multi = [o for o in result.outcomes.values() if o.multi_gpu_pods]
    hit = [o for o in multi if o.degraded_link]
    return len(multi), len(hit), (sum(o.stretch for o in hit) / len(hit) if hit else 1.0)


def attribution(aware: RunResult, blind: RunResult) -> tuple[float, float, float, float]:
    """Where the mean JCT difference (aware − blind, over jobs both placed) comes from:
    (total JCT difference h, of it waiting h, of it running h, the 10 largest job differences'
    share of the total)."""
    both = [i for i in aware.outcomes if i in blind.outcomes]
    diffs = [aware.outcomes[i].jct_s - blind.outcomes[i].jct_s for i in both]
    wait = sum(aware.outcomes[i].wait_s - blind.outcomes[i].wait_s for i in both)
    total = sum(diffs)
    top = sum(sorted(diffs, key=abs, reverse=True)[:10])
    return total / 3600, wait / 3600, (total - wait) / 3600, (top / total if total else 0.0)


def one_seed(seed: int, args: argparse.Namespace) -> None:
    spec = parse_cluster(CLUSTER)
    clean = build_nodes(spec, lambda p: discover_profile(p, hostname=p))
    midrun = args.mode == "midrun"
    nodes = clean if midrun else inject(clean, args.faulty, seed)
    jobs = generate(cluster_shape(nodes, jobs=args.jobs, load=args.load, seed=seed))
    faults: tuple[Fault, ...] = ()
    if midrun:
        horizon = max(j.arrival_s for j in jobs)
        faults = random_faults(nodes, seed=seed, horizon_s=horizon, link_share=args.faulty)
        links = sum(1 for f in faults if f.kind == "link")
        failed = sum(1 for f in faults if f.kind == "gpu")
        what = f"{links} NVLinks degrade and {failed} GPUs fail mid-run"
    else:
        sick = sum(1 for n in nodes if n.topology is not None and degraded_pairs(n.topology))
        what = f"{sick} with a degraded NVLink from the start"
    print(f"seed {seed}: {len(nodes)} nodes, {what}; {len(jobs)} jobs at load {args.load}")
    print(
        f"  {'placement':<14}{'multi-GPU':>10}{'on degraded':>12}{'JCT mean':>10}{'JCT p95':>9}"
        f"{'wait mean':>10}{'failed':>7}{'slowed':>7}{'lost GPU-h':>11}{'frag':>6}"
        f"{'gangs in a leaf':>16}{'placed':>9}"
    )
    results: dict[bool, RunResult] = {}
    for blind in (False, True):
        settings = ReplaySettings(health_blind=blind, faults=faults)
        sim = Simulator(nodes, jobs, cost_model=spec.cost_model, settings=settings)
        result = results[blind] = sim.run(make_policy("topos"))
        s = result.summary()
        multi, hit, _ = on_degraded(result)
        print(
            f"  {'health-blind' if blind else 'health-aware':<14}{multi:>10}{hit:>12}"
            f"{format_duration(s.jct_mean_s):>10}{format_duration(s.jct_p95_s):>9}"
            f"{format_duration(s.wait_mean_s):>10}{result.failed_jobs:>7}{result.slowed_jobs:>7}"
            f"{result.lost_gpu_s / 3600:>11.1f}{s.fragmentation_gpus:>6.1f}"
            f"{s.gangs_one_leaf_share:>16.0%}"
            f"{s.placed:>5}/{s.jobs}"
        )
    total, wait, run, top = attribution(results[False], results[True])
    print(
        f"  aware − blind, summed over jobs: JCT {total:+.1f} h = waiting {wait:+.1f} h"
        f" + running {run:+.1f} h; the 10 largest job differences make {top:.0%} of it"
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--load", type=float, default=0.85)
    ap.add_argument("--seeds", default="7,11,13", help="comma-separated; one trace each")
    ap.add_argument(
        "--mode",
        choices=("midrun", "static"),
        default="midrun",
        help="midrun: links degrade and GPUs fail while jobs run; static: links degraded "
        "from the start",
    )
    ap.add_argument("--faulty", type=float, default=0.25, help="share of nodes with a bad link")
    args = ap.parse_args(argv)
    for seed in (int(s) for s in args.seeds.split(",")):
        one_seed(seed, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
