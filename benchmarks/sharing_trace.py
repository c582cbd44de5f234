"""GPU sharing against fragmentation on a workload shaped like Alibaba's cluster-trace-gpu-v2023
(the ATC'23 FGD paper's): Topos's scheduling core against random, first-fit, best-fit, packing and
FGD, same cluster, same arrivals, same run.

The cluster is the trace's 1,213 GPU nodes (6,212 GPUs: G2, T4, G3, P100, V100M32, V100M16, A10;
1, 2, 4 or 8 per node) with their CPU and memory, ``--scale`` × as many. Pods are drawn from the
trace's 8,152 (fractional 37.8 %, one GPU 48.0 %, 2–8 GPUs 0.9 %, none 13.3 %, each with its CPU
and memory) and arrive one by one, never leaving, each placed or dropped, until the arrived GPU
demand reaches 1.3 × capacity (``benchmarks/sharing/trace.py``). The paper's metric: the share of
GPU capacity left unallocated when the arrived demand equals capacity, median over ``--seeds``
seeds; the whole curve goes to the text and, with matplotlib, to ``--plot``.

The baselines run over a small cluster model of their own (``benchmarks/sharing/``); Topos runs
through ``schedule_one`` on a ``Snapshot`` (``topos_arm.py``). ``--topos-mode whole`` gives each
fractional pod a whole GPU (``nvidia.com/gpu: 1``, Topos without sharing), ``fraction`` sends
``topos.io/gpu-fraction`` instead (reported as unsupported when the build ignores it), ``both``
runs the two. Also timed: µs per decision (decide and hold the choice), median over seeds.
``--against REV`` adds the Topos arm of another commit (``benchmarks/sharing/against.py``; the
code of issue 17's day is ``2272839``), and the speed goal is judged against it.

Run: ``.venv/bin/python -m benchmarks.sharing_trace [--seeds 10] [--scale 1.0]
[--topos-mode both] [--against REV] [--plot docs/sharing_trace.png]``; ``--json`` prints rows for
``benchmarks.run_all``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.sharing.against import (
    THIS_TREE,
    AgainstError,
    Tree,
    against_label,
    replay_at,
    this_tree,
    worktree,
)
from benchmarks.sharing.fgd import Fgd
from benchmarks.sharing.plot import write_png
from benchmarks.sharing.policies import BASELINES, Policy, best_fit
from benchmarks.sharing.replay import Run, curve, replay_baseline
from benchmarks.sharing.report import (
    TOPOS_FRACTION,
    TOPOS_WHOLE,
    curve_table,
    goal,
    json_rows,
    summarise,
    table,
)
from benchmarks.sharing.topos_arm import fraction_support
from benchmarks.sharing.topos_arm import replay as topos_replay
from benchmarks.sharing.trace import MILLI, Workload, pod_shapes, popularity, workload

ROOT = Path(__file__).resolve().parents[1]
WHOLE_BASELINE = "best-fit, whole GPU per fraction"


@dataclass
class Results:
    runs: dict[str, list[Run]] = field(default_factory=dict)
    unsupported: dict[str, str] = field(default_factory=dict)  # Topos arm → what the build does
    nodes: int = 0
    gpus: int = 0
    digests: list[str] = field(default_factory=list)  # "seed S, arm: digest" per Topos replay


def _topos(work: Workload, *, fraction: bool, digests: list[str]) -> Run | None:
    """The Topos arm's run; None when fractional asks were sent and no GPU was shared."""
    got = topos_replay(work, fraction=fraction)
    digests.append(f"seed {work.seed}, {TOPOS_FRACTION if fraction else TOPOS_WHOLE}: {got.digest}")
    if fraction and got.shared_gpus == 0:
        return None
    demands = [p.demand for p in work.pods]
    return Run(
        TOPOS_FRACTION if fraction else TOPOS_WHOLE,
        work.seed,
        len(work.pods),
        got.placed,
        got.seconds,
        curve(demands, got.allocated, work.capacity),
        tuple(got.violations),
    )


def run(
    seeds: Sequence[int],
    scale: float,
    *,
    ratio: float = 1.3,
    topos_mode: str = "both",
    baselines: Sequence[str] = (*BASELINES, "fgd", WHOLE_BASELINE),
    against: Tree | None = None,
    progress: bool = False,
) -> Results:
    policies: dict[str, tuple[Policy, bool]] = {}
    for name in baselines:
        if name == "fgd":
            policies[name] = (Fgd(popularity(pod_shapes())), False)
        elif name == WHOLE_BASELINE:
            policies[name] = (best_fit, True)
        else:
            policies[name] = (BASELINES[name], False)
    out = Results()
    modes = {"whole": [False], "fraction": [True], "both": [False, True], "none": []}[topos_mode]
    if True in modes:
        why = fraction_support()
        if why is not None:
            out.unsupported[TOPOS_FRACTION] = why
            modes.remove(True)
    for seed in seeds:
        work = workload(scale, seed, ratio)
        out.nodes, out.gpus = len(work.nodes), work.capacity // MILLI
        for name, (policy, whole) in policies.items():
            out.runs.setdefault(name, []).append(replay_baseline(name, policy, work, whole=whole))
        for fraction in list(modes):
            r = _topos(work, fraction=fraction, digests=out.digests)
            if r is None:
                out.unsupported[TOPOS_FRACTION] = "no decision named a GPU shared by two pods"
                out.runs.pop(TOPOS_FRACTION, None)
                modes.remove(True)
            else:
                out.runs.setdefault(r.policy, []).append(r)
        if against is not None:
            for tree, fraction in ((against, False), (this_tree(), True)):
                r = replay_at(tree, work, scale=scale, ratio=ratio, fraction=fraction)
                out.runs.setdefault(r.policy, []).append(r)
        if progress:
            print(f"  seed {seed}: {len(work.pods):,} pods", file=sys.stderr, flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10, help="seeds 0 … N-1")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the trace's nodes")
    ap.add_argument("--ratio", type=float, default=1.3, help="arrivals up to this × capacity")
    ap.add_argument("--topos-mode", choices=("whole", "fraction", "both", "none"), default="both")
    ap.add_argument("--plot", default=str(ROOT / "docs" / "sharing_trace.png"), help="'' for none")
    ap.add_argument("--json", action="store_true", help="print rows as JSON (for run_all)")
    ap.add_argument(
        "--against",
        default="",
        metavar="REV",
        help="also run the Topos arm of commit REV (whole GPU per fraction; in a git worktree, "
        "a process of its own) and judge the speed goal against it: the code of the issue's "
        "day is 2272839",
    )
    ap.add_argument(
        "--digests",
        action="store_true",
        help="print a digest of each Topos replay's decisions (equal: the same decisions)",
    )
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    if not 0 < args.scale <= 10:
        ap.error("--scale must be in (0, 10]: a fraction (or multiple) of the trace's 1,213 nodes")
    if args.ratio < 1.0:
        ap.error("--ratio must be at least 1.0: the metric is read at 100 % of capacity")
    try:
        with contextlib.ExitStack() as stack:
            tree = stack.enter_context(worktree(args.against)) if args.against else None
            res = run(
                range(args.seeds),
                args.scale,
                ratio=args.ratio,
                topos_mode=args.topos_mode,
                against=tree,
                progress=not args.json,
            )
    except AgainstError as exc:
        print(f"sharing_trace: --against {args.against}: {exc}", file=sys.stderr)
        return 2
    summaries = summarise(res.runs)
    case = f"{res.nodes:,} nodes, {res.gpus:,} GPUs, {args.seeds} seeds"
    notes = [
        f"cluster {case} (scale {args.scale:g} of cluster-trace-gpu-v2023); arrivals to "
        f"{args.ratio:g} × capacity; load average {os.getloadavg()[0]:.1f} at the end",
        goal(
            summaries,
            res.unsupported,
            speed=(
                (against_label(THIS_TREE, fraction=True), against_label(args.against))
                if args.against
                else None
            ),
        ),
    ]
    text = "\n\n".join([table(summaries, res.unsupported), curve_table(summaries)])
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
    if args.digests:
        print("\ndecision digests:\n" + "\n".join(res.digests))
    return 0


if __name__ == "__main__":
    sys.exit(main())
