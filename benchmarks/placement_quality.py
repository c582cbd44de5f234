"""Placement quality on one trace: Topos against the kube-scheduler-like spread baseline and a
naive first-fit, same cluster, same jobs, same run (``coordinator.sim``).

The cluster: 96 nodes in 12 leaves of 8 under 3 spines — DGX H100 (40), DGX A100 (24), 8×L40S
PCIe boxes (24, two sockets, PCIe switches: where GPU choice matters most), MIG A100s (8). The
trace: ``--jobs`` jobs from the synthetic generator (``docs/simulate.md``: mostly 1 GPU, powers
of two up to 8, ~6 % multi-node gangs, ~10 % MIG serving, ~5 % NUMA-pinned HPC, log-normal run
times) at ``--load`` offered load, seeded.

Reported per policy: share of multi-GPU pods on the best link class their node offers, share of
multi-node jobs (gangs) inside one leaf, idle GPUs stranded on partly used nodes
(fragmentation, time-weighted), GPU utilisation, and job completion time under the stated
communication-cost model (``coordinator/sim/costmodel.py``): run time × link factor
(NV 1.0, PIX 1.1, PXB 1.15, PHB/NODE 1.25, SYS 1.4) × network factor (node 1.0, leaf 1.1,
spine 1.25, wider 1.5).

Run: ``.venv/bin/python -m benchmarks.placement_quality [--jobs 1500] [--load 0.9] [--seed 7]``;
``--json`` prints rows for ``benchmarks.run_all``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from agent.devices import discover_profile
from common.model import NodeTopology
from coordinator.engine.gangs.service import GangSettings
from coordinator.forecast.engine import EngineSettings
from coordinator.sim import (
    ReplaySettings,
    Simulator,
    Summary,
    build_nodes,
    cluster_shape,
    describe,
    format_table,
    generate,
    make_policy,
    parse_cluster,
)
from coordinator.sim.report import format_duration

CLUSTER = """
name: bench-96
layout: {nodesPerLeaf: 8, leavesPerSpine: 4}
nodes:
  - {profile: dgx-h100, count: 40}
  - {profile: dgx-a100, count: 24}
  - {profile: pcie-8x, count: 24}
  - {profile: a100-mig, count: 8, namePrefix: mig}
"""
POLICIES = ("topos", "spread", "firstfit")


def topology_of(profile: str) -> NodeTopology:
    return discover_profile(profile, hostname=profile)


def rows(summaries: Sequence[Summary]) -> list[dict[str, Any]]:
    t = summaries[0]
    others = summaries[1:]

    def pct(x: float) -> str:
        return f"{100 * x:.0f} %"

    out = [
        ("multi-GPU pods on best link class", "best_link_share", pct, "higher"),
        ("multi-node jobs inside one leaf", "gangs_one_leaf_share", pct, "higher"),
        (
            "idle GPUs stranded on partly used nodes",
            "fragmentation_gpus",
            lambda x: f"{x:.1f}",
            "lower",
        ),
        ("GPU utilisation (arrival window)", "utilisation", pct, "higher"),
        ("modelled JCT mean", "jct_mean_s", format_duration, "lower"),
        ("modelled JCT p95", "jct_p95_s", format_duration, "lower"),
        ("queueing delay mean", "wait_mean_s", format_duration, "lower"),
        (
            "communication stretch (multi-GPU jobs)",
            "multi_gpu_stretch",
            lambda x: f"×{x:.3f}",
            "lower",
        ),
    ]
    result = []
    for figure, attr, fmt, better in out:
        result.append(
            {
                "case": f"{t.jobs} jobs, 96 nodes",
                "figure": figure,
                "topos": fmt(getattr(t, attr)),
                "baseline": ", ".join(f"{fmt(getattr(s, attr))} ({s.policy})" for s in others),
                "goal": f"{better} is better",
            }
        )
    result.append(
        {
            "case": f"{t.jobs} jobs, 96 nodes",
            "figure": "jobs placed (baselines ignore NUMA policies a node cannot honour)",
            "topos": f"{t.placed}/{t.jobs}",
            "baseline": ", ".join(f"{s.placed}/{s.jobs} ({s.policy})" for s in others),
            "goal": "",
        }
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1500)
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", action="store_true", help="print rows as JSON (for run_all)")
    ap.add_argument(
        "--no-preemption", action="store_true", help="the engine does not preempt (as before)"
    )
    args = ap.parse_args(argv)
    spec = parse_cluster(CLUSTER)
    nodes = build_nodes(spec, topology_of)
    jobs = generate(cluster_shape(nodes, jobs=args.jobs, load=args.load, seed=args.seed))
    gangs = GangSettings(preemption=not args.no_preemption)
    settings = ReplaySettings(engine=EngineSettings(gangs=gangs))
    sim = Simulator(nodes, jobs, cost_model=spec.cost_model, settings=settings)
    summaries = [sim.run(make_policy(name)).summary() for name in POLICIES]
    shape = describe(nodes)
    notes = [
        f"cluster {shape['nodes']} nodes, {shape['gpus']} GPUs, {shape['mig_instances']} MIG "
        f"instances, {shape['leaves']} leaves / {shape['spines']} spines; {len(jobs)} jobs at "
        f"offered load {args.load}, seed {args.seed}; the engine "
        + ("without" if args.no_preemption else "with")
        + " preemption",
        "engine speed (simulated s per wall s): "
        + ", ".join(f"{s.policy} {s.speed:,.0f}" for s in summaries)
        + "; jobs restarted after preemption: "
        + ", ".join(f"{s.policy} {s.restarts}" for s in summaries),
    ]
    if args.json:
        print(
            json.dumps({"rows": rows(summaries), "notes": notes, "table": format_table(summaries)})
        )
        return 0
    for note in notes:
        print(note)
    print()
    sys.stdout.write(format_table(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
