"""Defragmentation benchmark: large-gang waits and the work moves lose, off vs on demand vs
background, all arms in one run on the production engine (``coordinator.sim``: the scheduling
loop, gang step, preemptor and nominations on a simulated clock).

The cluster: 16 × DGX H100 (8 GPUs each) in 2 leaves. The trace (seeded, :func:`trace`): a
stream of single-pod services a ReplicaSet owns (``ownerReferences`` added to their manifests,
so they are movable), hours long, and 4 × 8-GPU gangs (32 GPUs, whole nodes); ``--trace
spread`` makes the services replicas of four Deployments spread over nodes, so that the gangs
wait for whole nodes rather than for GPUs. A moved pod's job starts over,
as its ReplicaSet would recreate it (the replay's restart); the work it had done is counted lost.

Arms, all in one run: defragmentation off, on demand, background, and KAI-style consolidation
for one pending job (:mod:`coordinator.sim.baselines.consolidation`). Reported per arm:
large-gang wait p50 / p95, whole-GPU utilisation, GPU-seconds lost to moves (and their share of
the GPU-seconds run), pods moved.

Run: ``.venv/bin/python -m benchmarks.defrag_replay [--trace steady|spread] [--hours H]
[--seed S] [--max-loss-ratio R] [--arms off,onDemand,...] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agent.devices import discover_profile
from common.model import NodeTopology
from coordinator.core.preemption.defrag import DefragPlanner, DefragSettings, plan_defrag
from coordinator.engine.gangs.service import GangSettings
from coordinator.forecast.engine import EngineSettings
from coordinator.sim import Job, ReplaySettings, Simulator, build_nodes, parse_cluster
from coordinator.sim.baselines.consolidation import kai_consolidation
from coordinator.sim.policies import make_policy

CLUSTER = """
name: defrag-16
layout: {nodesPerLeaf: 8, leavesPerSpine: 2}
nodes:
  - {profile: dgx-h100, count: 16}
"""
#: (arm, defragmentation mode, planner of moves): Topos's three modes and KAI-style consolidation
#: for one pending job (``coordinator/sim/baselines/consolidation.py``), on demand.
ARMS = (
    ("off", "off", plan_defrag),
    ("onDemand", "onDemand", plan_defrag),
    ("background", "background", plan_defrag),
    ("kai-consolidation", "onDemand", kai_consolidation),
)
LARGE = 4  # pods of 8 GPUs: a large gang


def topology_of(profile: str) -> NodeTopology:
    return discover_profile(profile, hostname=profile)


FLEETS = 4  # ``spread``: the services are replicas of this many Deployments


def trace(hours: float, seed: int, every_s: float, kind: str = "steady") -> list[Job]:
    """``steady``: 1–2-GPU services of 0.5–4 h, one every ``every_s`` on average, and a large gang
    every 30–50 min from 30 min on (the cluster runs near full: much of the gangs' waiting is
    shortage). ``spread``: 1-GPU replicas of 3–10 h, one every ``every_s`` on average, and a large
    gang every 60–120 min from 3 h on (about half the GPUs busy: the gangs wait for whole nodes
    the spread replicas leave none of)."""
    rng = random.Random(seed)
    jobs: list[Job] = []
    end = hours * 3600
    spread = kind == "spread"
    t, k = 0.0, 0
    while t < end:
        t += rng.expovariate(1 / every_s)
        jobs.append(
            Job(
                job_id=f"svc-{k}",
                arrival_s=round(t, 1),
                duration_s=round(
                    rng.uniform(3 * 3600, 10 * 3600) if spread else rng.uniform(1800, 4 * 3600), 1
                ),
                gpus=1 if spread else rng.choice((1, 1, 2)),
            )
        )
        k += 1
    t, k = (3 * 3600.0, 0) if spread else (1800.0, 0)
    while t < end:
        jobs.append(
            Job(
                job_id=f"train-{k}",
                arrival_s=round(t, 1),
                duration_s=3600.0,
                gpus=8,
                gang_size=LARGE,
            )
        )
        t += rng.uniform(3600, 7200) if spread else rng.uniform(1800, 3000)
        k += 1
    return sorted(jobs, key=lambda j: j.arrival_s)


def movable(sim: Simulator, *, spread: bool = False) -> None:
    """Single-pod jobs are a ReplicaSet's (movable); gangs stay bare. ``spread``: the services
    are replicas of :data:`FLEETS` Deployments that ask to be spread over nodes
    (``topologySpreadConstraints`` by hostname, ``ScheduleAnyway``), as inference fleets do."""
    out = []
    for job, manifests in zip(sim.jobs, sim.manifests, strict=True):
        if job.gang_size == 1:
            owner = f"fleet-{int(job.job_id.rpartition('-')[2]) % FLEETS}" if spread else job.job_id
            ref = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": owner,
                "uid": f"rs-{owner}",
                "controller": True,
            }
            changed = []
            for m in manifests:
                meta = {**m["metadata"], "ownerReferences": [ref]}
                spec = dict(m["spec"])
                if spread:
                    meta["labels"] = {**meta.get("labels", {}), "app": owner}
                    spec["topologySpreadConstraints"] = [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "ScheduleAnyway",
                            "labelSelector": {"matchLabels": {"app": owner}},
                        }
                    ]
                changed.append({**m, "metadata": meta, "spec": spec})
            manifests = changed
        out.append(manifests)
    sim.manifests = tuple(out)


def percentile(values: Sequence[float], q: int) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def arm(
    name: str,
    mode: str,
    mover: DefragPlanner,
    hours: float,
    seed: int,
    every_s: float,
    ratio: float,
    kind: str = "steady",
) -> dict[str, Any]:
    spec = parse_cluster(CLUSTER)
    nodes = build_nodes(spec, topology_of)
    jobs = trace(hours, seed, every_s, kind)
    gangs = GangSettings(defrag=DefragSettings(mode=mode, max_loss_ratio=ratio))
    settings = ReplaySettings(engine=EngineSettings(gangs=gangs))
    sim = Simulator(nodes, jobs, cost_model=spec.cost_model, settings=settings)
    movable(sim, spread=kind == "spread")
    result = sim.run(replace(make_policy("topos"), mover=mover))
    summary = result.summary()
    waits = sorted(o.wait_s for o in result.outcomes.values() if o.job.gang_size == LARGE)
    run_gpu_s = sum(
        o.job.gpus * o.job.gang_size * (o.end_s - o.start_s) for o in result.outcomes.values()
    )
    large = sum(1 for j in jobs if j.gang_size == LARGE)
    return {
        "arm": name,
        "large gangs placed": f"{len(waits)}/{large}",
        "large wait p50 (s)": round(percentile(waits, 50)),
        "large wait p95 (s)": round(percentile(waits, 95)),
        "utilisation": round(summary.utilisation, 3),
        "GPU-s lost": round(result.lost_gpu_s),
        "lost share": round(result.lost_gpu_s / run_gpu_s, 4) if run_gpu_s else 0.0,
        "pods moved": result.lost_pods,
        "defrags": result.defrags,
        "compaction moves": result.compacted_pods,
        # evictions per freed domain: pods moved for each node a move emptied for a gang
        "moved per freed node": (
            round(result.moved_pods / result.freed_nodes, 2) if result.freed_nodes else "-"
        ),
        "jobs": len(jobs),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", choices=("steady", "spread"), default="steady")
    ap.add_argument("--hours", type=float, default=None, help="default: 12 (steady), 24 (spread)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--every", type=float, default=None, help="mean seconds between services (150 / 400)"
    )
    ap.add_argument("--arms", default=",".join(a[0] for a in ARMS), help="comma-separated")
    ap.add_argument("--max-loss-ratio", type=float, default=DefragSettings().max_loss_ratio)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    spread = args.trace == "spread"
    hours = args.hours if args.hours is not None else (24.0 if spread else 12.0)
    every = args.every if args.every is not None else (400.0 if spread else 150.0)
    wanted = set(args.arms.split(","))
    rows = [
        arm(name, mode, mover, hours, args.seed, every, args.max_loss_ratio, args.trace)
        for name, mode, mover in ARMS
        if name in wanted
    ]
    if args.json:
        print(json.dumps(rows))
        return 0
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row[k]) for k in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
