"""Every upstream scheduler_perf case the runner reads, Topos against kube-scheduler: ``make
scheduler-perf``.

Runs ``python -m benchmarks.scheduler_perf --json`` for each case of :data:`SUITE` (each its own
control plane, one after the other, kube-scheduler first), keeps each case's result as JSON in
``--out`` (with when it ran, the commit, the load before and after, the command and its exit
status), then writes one table of every case whose result is there — Topos ÷ kube-scheduler
pods/s and CPU per pod against the goal — between the markers :data:`MARKERS` of
``docs/benchmarks.md``. A case run again replaces its own row only, so ``--cases a,b`` refreshes
part of the table and the other rows keep their dates. ``--render`` writes the table from the
results already in ``--out`` without running anything.

The workloads are upstream's at 500 nodes (the 5,000-node ones take hours on a small machine; a
few are scaled down where upstream's did not get past their warm-up here: the ``params``);
:data:`LARGE` holds the bigger ones, run only when named in ``--cases``. The four
``namespaceSelector`` affinity cases measure 100 pods at 500 nodes upstream, a measured phase of
0.4 s (their single rounds gave 0.71-1.56x pods/s and 0.65-0.94x CPU on 2026-12-01/02); they
measure 1,000 here (their 5,000-node workloads' count; the required anti-affinity one 400, as
its pods take a node each), two rounds.

    python -m benchmarks.scheduler_perf_suite [--cases a,b] [--out DIR] [--output PAGE] [--render]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from benchmarks.run_all import Markers, PageError, check_page, commit, machine, write_page
from benchmarks.scheduler_perf import Ratio

ROOT: Final = Path(__file__).resolve().parents[1]
MARKERS: Final[Markers] = (
    "<!-- scheduler_perf:begin: written by `make scheduler-perf` "
    "(benchmarks/scheduler_perf_suite.py); edits here are lost -->",
    "<!-- scheduler_perf:end -->",
)
#: Where results are kept between runs (``--out``).
DEFAULT_OUT: Final = Path.home() / ".cache" / "topos" / "scheduler_perf"
#: The issue's goals: pods/s at least kube-scheduler's, CPU per pod at most 0.8 of it (the DRA
#: claim cases: pods/s only).
PODS_GOAL: Final = 1.0
CPU_GOAL: Final = 0.8


@dataclass(frozen=True, slots=True)
class Case:
    """One upstream case as the suite runs it."""

    name: str  # the suite's short name: ``--cases`` and the result's file name
    config: str  # under test/integration/scheduler_perf/
    case: str
    workload: str
    params: tuple[tuple[str, str], ...] = ()
    repeat: int = 1
    timeout_s: int = 600  # per measured run (the runner's --timeout)
    dra: bool = False  # a DRA claim case: the goal is pods/s alone

    def argv(self) -> list[str]:
        out = ["--config", self.config, "--case", self.case, "--workload", self.workload]
        for key, value in self.params:
            out += ["--param", f"{key}={value}"]
        return [*out, "--repeat", str(self.repeat), "--timeout", str(self.timeout_s)]

    @property
    def label(self) -> str:
        text = f"{self.case}/{self.workload}"
        if self.params:
            text += " (" + ", ".join(f"{k}={v}" for k, v in self.params) + ")"
        return text


_A, _T, _E = (
    "affinity/performance-config.yaml",
    "topology_spreading/performance-config.yaml",
    "event_handling/performance-config.yaml",
)
_M, _V, _D = (
    "misc/performance-config.yaml",
    "volumes/performance-config.yaml",
    "dra/performance-config.yaml",
)
_N = "nodedeclaredfeatures/performance-config.yaml"
#: The ``namespaceSelector`` cases' measured pods (upstream's 100 at 500 nodes: see above).
_THOUSAND: Final = (("measurePods", "1000"),)

SUITE: Final[tuple[Case, ...]] = (
    Case("basic", _M, "SchedulingBasic", "500Nodes", repeat=2),
    Case(
        "daemonset",
        _M,
        "SchedulingDaemonset",
        "5Nodes",
        (("initNodes", "500"), ("measurePods", "1000")),
        repeat=2,
    ),
    Case(
        "whilegated",
        _M,
        "SchedulingWhileGated",
        "1Node_10000GatedPods",
        (("gatedPods", "1000"), ("deletingPods", "2000"), ("measurePods", "2000")),
    ),
    Case("unschedulable", _M, "Unschedulable", "500Nodes/10Init/1kPods"),
    Case(
        "preemption",
        _M,
        "PreemptionBasic",
        "1000Nodes",
        (("initNodes", "500"), ("initPods", "2000"), ("measurePods", "500")),
    ),
    Case("preemption-async", _M, "PreemptionAsync", "500Nodes"),
    Case("extended-resource", _M, "SchedulingWithExtendedResource", "500pods_500nodes"),
    Case("finalizers", _M, "SchedulingDeletedPodsWithFinalizers", "1000Node_1000DeletingPods"),
    Case("mixed-churn", _M, "SchedulingWithMixedChurn", "1000Nodes"),
    Case("anti-affinity", _A, "SchedulingPodAntiAffinity", "500Nodes"),
    Case("affinity", _A, "SchedulingPodAffinity", "500Nodes"),
    Case("matching-anti-affinity", _A, "SchedulingPodMatchingAntiAffinity", "500Nodes"),
    Case("preferred-affinity", _A, "SchedulingPreferredPodAffinity", "500Nodes"),
    Case("preferred-anti-affinity", _A, "SchedulingPreferredPodAntiAffinity", "500Nodes"),
    Case("node-affinity", _A, "SchedulingNodeAffinity", "500Nodes"),
    Case("mixed-base-pod", _A, "MixedSchedulingBasePod", "500Nodes"),
    Case(
        "anti-affinity-ns",
        _A,
        "SchedulingRequiredPodAntiAffinityWithNSSelector",
        "500Nodes",
        (("measurePods", "400"),),  # one pod per node: 40 init pods and 400 fit 500 nodes
        repeat=2,
    ),
    Case(
        "preferred-anti-affinity-ns",
        _A,
        "SchedulingPreferredAntiAffinityWithNSSelector",
        "500Nodes",
        _THOUSAND,
        repeat=2,
    ),
    Case(
        "affinity-ns",
        _A,
        "SchedulingRequiredPodAffinityWithNSSelector",
        "500Nodes",
        _THOUSAND,
        repeat=2,
    ),
    Case(
        "preferred-affinity-ns",
        _A,
        "SchedulingPreferredAffinityWithNSSelector",
        "500Nodes",
        _THOUSAND,
        repeat=2,
    ),
    Case(
        "gated-affinity",
        _A,
        "SchedulingGatedPodsWithPodAffinityImpactForThroughput",
        "1Node_10000GatedPods",
        (("gatedPods", "1000"), ("measurePods", "2000")),
    ),
    Case("spreading", _T, "TopologySpreading", "500Nodes"),
    Case("preferred-spreading", _T, "PreferredTopologySpreading", "500Nodes"),
    Case("default-spreading", _T, "DefaultTopologySpreading", "500Nodes"),
    Case("inclusion-policy", _T, "SchedulingWithNodeInclusionPolicy", "500Nodes"),
    Case("pod-add", _E, "EventHandlingPodAdd", "1000Pods", (("measurePods", "100"),)),
    Case("pod-update", _E, "EventHandlingPodUpdate", "1Node_1000Pods"),
    Case("pod-delete", _E, "EventHandlingPodDelete", "50Nodes_500Pods"),
    Case("node-add", _E, "EventHandlingNodeAdd", "100Nodes_1000Pods"),
    Case("node-update", _E, "EventHandlingNodeUpdate", "100Nodes_1000Pods"),
    Case(
        "node-declared-features",
        _N,
        "NodeDeclaredFeaturesEnabled",
        "5000Nodes20DeclaredFeatures",
        (("nodes", "500"), ("initPods", "500"), ("measurePods", "1000")),
    ),
    Case("secrets", _V, "SchedulingSecrets", "500Nodes"),
    Case("csi-pvs", _V, "SchedulingCSIPVs", "500Nodes"),
    Case("in-tree-pvs", _V, "SchedulingInTreePVs", "500Nodes"),
    Case("migrated-in-tree-pvs", _V, "SchedulingMigratedInTreePVs", "500Nodes"),
    Case("preemption-pvs", _V, "PreemptionPVs", "1000Nodes"),
    Case(
        "dra-template",
        _D,
        "SchedulingWithResourceClaimTemplate",
        "2000pods_200nodes",
        timeout_s=300,
        dra=True,
    ),
    Case(
        "dra-claim", _D, "SchedulingWithResourceClaim", "5000pods_500nodes", timeout_s=400, dra=True
    ),
    Case(
        "dra-steady-empty",
        _D,
        "SteadyStateClusterResourceClaimTemplate",
        "empty_500nodes",
        dra=True,
    ),
    Case(
        "dra-steady-half", _D, "SteadyStateClusterResourceClaimTemplate", "half_500nodes", dra=True
    ),
    Case(
        "dra-steady-full", _D, "SteadyStateClusterResourceClaimTemplate", "full_500nodes", dra=True
    ),
)
#: Run only when named in ``--cases`` (each 20 minutes or more here).
LARGE: Final[tuple[Case, ...]] = (
    Case("basic-5000", _M, "SchedulingBasic", "5000Nodes", timeout_s=1200),
    Case(
        "dra-template-500",
        _D,
        "SchedulingWithResourceClaimTemplate",
        "5000pods_500nodes",
        timeout_s=1800,
        dra=True,
    ),
)
CASES: Final[Mapping[str, Case]] = {c.name: c for c in (*SUITE, *LARGE)}


def run_case(case: Case, out: Path, *, python: str = sys.executable) -> dict[str, Any]:
    """Run ``case`` (both schedulers) and keep its result as ``out/<name>.json``."""
    argv = [python, "-m", "benchmarks.scheduler_perf", *case.argv(), "--json"]
    load0 = os.getloadavg()[0]
    started = datetime.datetime.now(datetime.UTC)
    t0 = time.perf_counter()
    wall_cap = case.repeat * 2 * (case.timeout_s + 300) + 600
    try:
        proc = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=wall_cap, check=False
        )
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = 124, _text(exc.stdout), _text(exc.stderr)
    result: dict[str, Any] = {
        "name": case.name,
        "label": case.label,
        "command": "python -m benchmarks.scheduler_perf " + " ".join(case.argv()),
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round(time.perf_counter() - t0),
        "commit": commit(),
        "load": [round(load0, 1), round(os.getloadavg()[0], 1)],
        "rc": rc,
        "report": _report(stdout),
        "stderr_tail": stderr[-4000:],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{case.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _report(stdout: str) -> dict[str, Any] | None:
    """The runner's ``--json`` report: its last line that is a JSON object."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def load_results(out: Path, cases: Sequence[Case]) -> dict[str, dict[str, Any]]:
    """The kept result of each of ``cases`` found in ``out`` (a file that is not a result is
    named on stderr and skipped)."""
    found: dict[str, dict[str, Any]] = {}
    for case in cases:
        path = out / f"{case.name}.json"
        if not path.is_file():
            continue
        try:
            value = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"{path}: not a result ({exc}); skipped", file=sys.stderr)
            continue
        if isinstance(value, dict):
            found[case.name] = value
    return found


@dataclass(frozen=True, slots=True)
class Row:
    """One case's figures as the table shows them: the runner's ratios (the median of the
    rounds) and each side's figures."""

    ratio: Ratio
    topos: str  # pods/s (of the creation rate), CPU ms per pod (to the Events written)
    kube: str
    timed_out: bool = False  # a run of either scheduler stopped at its timeout

    def goal(self, dra: bool) -> str:
        pods = self.ratio.pods_per_s >= PODS_GOAL
        if dra:
            return "met" if pods else "pods/s missed"
        cpu = self.ratio.cpu_per_pod <= CPU_GOAL
        if pods and cpu:
            return "met"
        return ", ".join(
            what for what, ok in (("pods/s missed", pods), ("CPU missed", cpu)) if not ok
        )


def _span(values: Sequence[float], fmt: str) -> str:
    low, high = min(values), max(values)
    return (
        format(low, fmt) if format(low, fmt) == format(high, fmt) else f"{low:{fmt}}–{high:{fmt}}"
    )


def _side(runs: Sequence[Mapping[str, Any]]) -> str:
    rate = _span([float(r["pods_per_s"]) for r in runs], ".1f")
    kept = _span([100 * float(r["kept_up"]) for r in runs], ".0f")
    cpu = _span([float(r["cpu_ms_per_pod"]) for r in runs], ".2f")
    text = f"{rate} ({kept} %), {cpu} ms"
    after = [
        1000 * float(r["cpu_events_s"]) / max(1, int(r["bound"]))
        for r in runs
        if float(r.get("events_after_s") or 0)
    ]
    if after:
        text += f" ({_span(after, '.2f')} ms to its Events)"
    return text


def row_of(report: Mapping[str, Any] | None) -> Row | None:
    """The table's figures from one runner report; ``None`` where there is none or a round lacks
    a ratio (a scheduler bound nothing)."""
    if report is None:
        return None
    ratio = report.get("median")
    if ratio is None:
        rounds = report.get("rounds") or []
        if not rounds:
            return None
        ratio = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    runs = report.get("runs") or []
    topos = [r for r in runs if r.get("scheduler") == "topos"]
    kube = [r for r in runs if r.get("scheduler") == "kube-scheduler"]
    if not topos or not kube:
        return None
    timed_out = any(r.get("timed_out") for r in runs)
    return Row(
        Ratio(**{k: float(v) for k, v in ratio.items()}), _side(topos), _side(kube), timed_out
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(results: Mapping[str, Mapping[str, Any]], cases: Sequence[Case]) -> str:
    """The generated block: the machine, then a row per case of ``cases`` (in order) that has a
    result, and how many meet each goal."""
    info = machine()
    lines = [
        "Each row is one invocation of the runner: kube-scheduler v1.36.3 and Topos on the same "
        "control plane, one after the other (kube-scheduler first; `×2`: then Topos first, the "
        "median of the two rounds), no client rate limit. Topos ÷ kube-scheduler; each side: "
        "pods/s (the share of the benchmark's own creation rate bound), CPU per pod at the last "
        "bind (and where Topos' Scheduled Events trailed its binds, to the last one written). "
        f"Goal: pods/s ≥ {PODS_GOAL:.1f}× and CPU per pod ≤ {CPU_GOAL:.1f}× (DRA claim cases: "
        "pods/s). Machine: "
        + ", ".join(f"{info[k]}" for k in ("CPU", "cores", "memory", "Python", "OS"))
        + ".",
        "",
        "| case | pods/s | CPU per pod | requests per pod | Topos | kube-scheduler | goal | run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    met = {"pods": 0, "cpu": 0, "both": 0, "rows": 0}
    for case in cases:
        result = results.get(case.name)
        if result is None:
            continue
        rounds = f" ×{case.repeat}" if case.repeat > 1 else ""
        when = (
            f"{result['started']}, `{result['commit']}`, load "
            f"{result['load'][0]:.1f} → {result['load'][1]:.1f}, {result['seconds']} s"
        )
        report = result.get("report")
        row = row_of(report)
        if row is None:
            failed = f"**failed** (exit {result['rc']})" if result["rc"] else "**no ratio**"
            cells = (f"{case.label}{rounds}", failed, "", "", "", "", "", when)
        else:
            met["rows"] += 1
            met["pods"] += row.ratio.pods_per_s >= PODS_GOAL
            met["cpu"] += case.dra or row.ratio.cpu_per_pod <= CPU_GOAL
            goal = row.goal(case.dra)
            met["both"] += goal == "met"
            cells = (
                f"{case.label}{rounds}",
                f"**{row.ratio.pods_per_s:.2f}×** (of the creation rate {row.ratio.kept_up:.2f}×)",
                f"**{row.ratio.cpu_per_pod:.2f}×**",
                f"{row.ratio.requests_per_pod:.2f}×",
                row.topos,
                row.kube,
                goal + (" (a run timed out)" if row.timed_out else ""),
                when,
            )
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines += [
        "",
        f"Of {met['rows']} cases: pods/s met in {met['pods']}, CPU per pod in {met['cpu']}, "
        f"both in {met['both']}.",
    ]
    return "\n".join(lines) + "\n"


def select(names: str) -> list[Case]:
    """The cases ``--cases`` names (all of :data:`SUITE` for none); an unknown name raises
    ``KeyError`` naming it and the known ones."""
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    if not wanted:
        return list(SUITE)
    unknown = [n for n in wanted if n not in CASES]
    if unknown:
        raise KeyError(f"--cases: unknown case {unknown[0]!r}; known: {', '.join(CASES)}")
    return [CASES[n] for n in wanted]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scheduler_perf_suite")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: SUITE)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where results are kept")
    ap.add_argument("--output", default=str(ROOT / "docs" / "benchmarks.md"), help="- : stdout")
    ap.add_argument("--render", action="store_true", help="write the table; run nothing")
    args = ap.parse_args(argv)
    try:
        chosen = select(args.cases)
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2
    if args.output != "-":
        try:
            check_page(Path(args.output), MARKERS)
        except PageError as exc:
            print(exc, file=sys.stderr)
            return 2
    failed = 0
    if not args.render:
        for i, case in enumerate(chosen, 1):
            print(f"[{i}/{len(chosen)}] {case.label}", file=sys.stderr, flush=True)
            result = run_case(case, args.out)
            failed += result["rc"] != 0
            report = result["report"]
            row = row_of(report)
            print(
                f"    exit {result['rc']}, {result['seconds']} s"
                + (
                    ""
                    if row is None
                    else f": pods/s {row.ratio.pods_per_s:.2f}×, CPU {row.ratio.cpu_per_pod:.2f}×"
                ),
                file=sys.stderr,
                flush=True,
            )
    table_cases = [*SUITE, *LARGE]
    block = render(load_results(args.out, table_cases), table_cases)
    if args.output == "-":
        sys.stdout.write(block)
    else:
        write_page(Path(args.output), block, MARKERS)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
