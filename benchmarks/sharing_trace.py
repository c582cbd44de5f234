"""GPU sharing against fragmentation on a workload shaped like Alibaba's cluster-trace-gpu-v2023
(the ATC'23 FGD paper's): Topos against random, first-fit, best-fit, packing and FGD, same
cluster, same arrivals, all on the production engine.

The cluster is the trace's 1,213 GPU nodes (6,212 GPUs: G2, T4, G3, P100, V100M32, V100M16, A10;
1, 2, 4 or 8 per node) with their CPU and memory, ``--scale`` × as many. Pods are drawn from the
trace's 8,152 (fractional 37.8 %, one GPU 48.0 %, 2–8 GPUs 0.9 %, none 13.3 %, each with its CPU
and memory) until the arrived GPU demand reaches 1.3 × capacity (``benchmarks/sharing/
workload.py``), written as a trace of the simulator's format (a share is ``gpu_fraction``).

Every policy is a profile of the engine ``topos simulate`` runs (``coordinator/sim``): Topos's
default profile, and the paper's baselines as profiles of their own
(``coordinator/sim/baselines/sharing.py``). The replay is the simulator's *fill* mode, the
paper's: pods arrive one a second and never leave, and a pod whose first attempt fails is
dropped. The paper's metric: the share of GPU capacity left unallocated when the arrived demand
equals capacity, median over ``--seeds`` seeds; the whole curve goes to the text and, with
matplotlib, to ``--plot``. ``--topos-mode whole`` gives each fractional pod a whole GPU
(``nvidia.com/gpu: 1``, Topos without sharing), ``fraction`` sends ``topos.io/gpu-fraction``,
``both`` runs the two. Also timed: CPU µs of the replay per pod (the engine's queue, binds, Events
and simulated clock included: CPU time, not wall, so a busy machine counts less), median over
seeds.

Every placement is checked against a ledger kept here: CPU and memory within each node's, a whole
GPU never given twice, a GPU's shares never above 1,000 thousandths, every pod placed at its
arrival.

Run: ``.venv/bin/python -m benchmarks.sharing_trace [--seeds 10] [--scale 1.0]
[--topos-mode both] [--plot docs/sharing_trace.png]``; ``--json`` prints rows for
``benchmarks.run_all``; ``--write-trace F`` writes seed 0's arrivals as a trace (CSV).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from benchmarks.sharing.plot import write_png
from benchmarks.sharing.report import (
    TOPOS_FRACTION,
    TOPOS_WHOLE,
    Run,
    curve,
    curve_table,
    goal,
    json_rows,
    summarise,
    table,
)
from benchmarks.sharing.workload import (
    MILLI,
    Workload,
    jobs,
    node_infos,
    pod_shapes,
    popularity,
    workload,
)
from coordinator.sim.baselines.perpod import members_one_by_one
from coordinator.sim.baselines.sharing import SHARING_RULES, Fgd, sharing_framework
from coordinator.sim.metrics import RunResult
from coordinator.sim.policies import Policy, make_policy
from coordinator.sim.replay import ReplaySettings, Simulator
from coordinator.sim.trace import dump_csv

ROOT = Path(__file__).resolve().parents[1]
WHOLE_BASELINE: Final = "best-fit, whole GPU per fraction"
BASELINES: Final = (*SHARING_RULES, WHOLE_BASELINE)
#: ``--baselines`` names (the arms' names have commas)
SHORT: Final = {**{r: r for r in SHARING_RULES}, "best-fit-whole": WHOLE_BASELINE}
FILL: Final = ReplaySettings(fill=True)


@dataclass
class Results:
    runs: dict[str, list[Run]] = field(default_factory=dict)
    nodes: int = 0
    gpus: int = 0


def policy(name: str, seed: int) -> tuple[Policy, bool]:
    """The policy an arm runs, and whether its shares ask ``gpu_fraction`` (else a whole GPU)."""
    if name in (TOPOS_WHOLE, TOPOS_FRACTION):
        return make_policy("topos"), name == TOPOS_FRACTION
    rule = "best-fit" if name == WHOLE_BASELINE else name
    fgd = Fgd(popularity(pod_shapes())) if rule == "fgd" else None
    framework = sharing_framework(rule, seed=seed, fgd=fgd)
    return Policy(name, framework, members_one_by_one), name != WHOLE_BASELINE


def check(work: Workload, result: RunResult, *, fraction: bool) -> list[str]:
    """What would make the figures wrong: a node's CPU or memory over-committed, a GPU given
    whole twice or shared beyond its thousandths, a pod placed after its arrival."""
    shapes = {n.name: n.shape for n in work.nodes}
    cpu: dict[str, int] = {}
    memory: dict[str, int] = {}
    gpu: dict[tuple[str, int], int] = {}
    out = []
    for i, outcome in result.outcomes.items():
        pod = work.pods[i]
        if outcome.start_s != outcome.job.arrival_s:
            out.append(f"{outcome.job.job_id} placed at {outcome.start_s:g} s, not on arrival")
        for node, placement in outcome.placements:
            cpu[node] = cpu.get(node, 0) + pod.cpu_milli
            memory[node] = memory.get(node, 0) + pod.memory_mib
            if cpu[node] > shapes[node].cpu_milli or memory[node] > shapes[node].memory_mib:
                out.append(f"{node}: CPU or memory over-committed")
            share = placement.share.milli if placement.share is not None else MILLI
            if len(placement.gpus) != pod.gpus:
                out.append(f"{node}: {pod.gpus} GPU(s) asked, got {placement.gpus}")
            if (placement.share is not None) != (pod.fractional and fraction):
                out.append(f"{outcome.job.job_id}: share {placement.share} for {pod}")
            for g in placement.gpus:
                gpu[(node, g)] = gpu.get((node, g), 0) + share
                if gpu[(node, g)] > MILLI:
                    out.append(f"{node} GPU {g}: {gpu[(node, g)]} thousandths held")
    return out


def replay(name: str, work: Workload) -> Run:
    """One arm over one seed's arrivals, in the simulator's fill mode."""
    chosen, fraction = policy(name, work.seed)
    sim = Simulator(node_infos(work.nodes), jobs(work, fraction=fraction), settings=FILL)
    began = time.process_time()
    result = sim.run(chosen)
    seconds = time.process_time() - began
    allocated: list[int] = []
    total = 0
    for i, pod in enumerate(work.pods):
        if i in result.outcomes:
            total += pod.demand  # its own GPU, even when given a whole one
        allocated.append(total)
    return Run(
        name,
        work.seed,
        len(work.pods),
        len(result.outcomes),
        seconds,
        curve([p.demand for p in work.pods], allocated, work.capacity),
        tuple(check(work, result, fraction=fraction)),
    )


def run(
    seeds: Sequence[int],
    scale: float,
    *,
    ratio: float = 1.3,
    topos_mode: str = "both",
    baselines: Sequence[str] = BASELINES,
    progress: bool = False,
) -> Results:
    toposes = {
        "whole": [TOPOS_WHOLE],
        "fraction": [TOPOS_FRACTION],
        "both": [TOPOS_WHOLE, TOPOS_FRACTION],
        "none": [],
    }[topos_mode]
    out = Results()
    for seed in seeds:
        work = workload(scale, seed, ratio)
        out.nodes, out.gpus = len(work.nodes), work.capacity // MILLI
        for name in (*baselines, *toposes):
            out.runs.setdefault(name, []).append(replay(name, work))
            if progress:
                print(f"  seed {seed}: {name}", file=sys.stderr, flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10, help="seeds 0 … N-1")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the trace's nodes")
    ap.add_argument("--ratio", type=float, default=1.3, help="arrivals up to this × capacity")
    ap.add_argument("--topos-mode", choices=("whole", "fraction", "both", "none"), default="both")
    ap.add_argument(
        "--baselines",
        default=",".join(SHORT),
        help=f"comma-separated, of: {', '.join(SHORT)} ('' for none)",
    )
    ap.add_argument("--plot", default=str(ROOT / "docs" / "sharing_trace.png"), help="'' for none")
    ap.add_argument("--json", action="store_true", help="print rows as JSON (for run_all)")
    ap.add_argument("--write-trace", default="", metavar="F", help="write seed 0's trace (CSV)")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    if not 0 < args.scale <= 10:
        ap.error("--scale must be in (0, 10]: a fraction (or multiple) of the trace's 1,213 nodes")
    if args.ratio < 1.0:
        ap.error("--ratio must be at least 1.0: the metric is read at 100 % of capacity")
    asked = [b.strip() for b in args.baselines.split(",") if b.strip()]
    unknown = [b for b in asked if b not in SHORT]
    if unknown:
        ap.error(f"--baselines: unknown {unknown[0]!r} (known: {', '.join(SHORT)})")
    baselines = [SHORT[b] for b in asked]
    if args.write_trace:
        Path(args.write_trace).write_text(dump_csv(jobs(workload(args.scale, 0, args.ratio))))
    res = run(
        range(args.seeds),
        args.scale,
        ratio=args.ratio,
        topos_mode=args.topos_mode,
        baselines=baselines,
        progress=not args.json,
    )
    summaries = summarise(res.runs)
    case = f"{res.nodes:,} nodes, {res.gpus:,} GPUs, {args.seeds} seeds"
    notes = [
        f"cluster {case} (scale {args.scale:g} of cluster-trace-gpu-v2023); arrivals to "
        f"{args.ratio:g} × capacity; load average {os.getloadavg()[0]:.1f} at the end",
        goal(summaries),
    ]
    text = "\n\n".join([table(summaries), curve_table(summaries)])
    if args.plot and summaries:
        why = write_png(summaries, Path(args.plot), f"cluster-trace-gpu-v2023 shape: {case}")
        notes.append(f"plot: {why}" if why else f"plot: {args.plot}")
    if args.json:
        print(json.dumps({"rows": json_rows(summaries, case), "notes": notes, "table": text}))
        return 0
    print(notes[0])
    print()
    print(text)
    print()
    print("\n".join(notes[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
