"""Run every benchmark, collect their figures, and write them into ``docs/benchmarks.md``.

``make bench`` runs ``python -m benchmarks.run_all``. Each benchmark runs in its own process
(``python -m benchmarks.<name>``, one after the other, so they do not compete for the CPU), with
the arguments listed in ``ARGS`` (sizes chosen to finish in minutes on a small machine). Those
that print rows (``--json`` → ``{"rows": [...], "notes": [...]}``) fill the summary table; for
the others, their verdict lines ("target …", "goal …") go in the table. Each benchmark's whole
output is printed as it finishes (the page keeps only a failed one's). A benchmark module added
later (one with a ``__main__`` guard) is picked up automatically and run with no arguments.

The run's figures — date, commit, machine, load, a summary row per figure, the command and
duration of each benchmark, and the output of any that failed — replace only what lies between
the markers :data:`BEGIN` and :data:`END` of the page; everything else on it is written by hand
and kept. A page without both markers, once each and in order, is refused before any benchmark
runs (and left as it is); a file that does not exist yet is created holding the markers and the
run.

Options: ``--only a,b`` runs a subset, ``--output F`` writes elsewhere (``-`` for stdout: the
generated block alone), ``--timeout S`` per benchmark (default 900 s).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent

#: Arguments per benchmark; modules printing JSON rows get ``--json`` as well.
ARGS: dict[str, list[str]] = {
    "decision_scaling": ["--sizes", "1000,5000,10000", "--pods", "400"],
    "decision_latency": ["--nodes", "1000", "--pods", "1000"],
    "gang_placement": [],
    "placement_quality": ["--jobs", "1500"],
    "resource_use": ["--nodes", "1000"],
    "agent_cycle": ["--cycles", "100"],
    "discovery": ["--runs", "100"],
    "ingest": ["--nodes", "1000", "--seconds", "5"],
    "binding_throughput": ["--nodes", "200", "--pods", "500"],
    "watch_events": ["--nodes", "5000", "--pods", "3000"],
    "churn_soak": ["--rounds", "1000", "--quiet"],
    "sharing_trace": ["--seeds", "3", "--scale", "0.25"],
}
#: Benchmarks that need longer than ``--timeout`` (seconds).
TIMEOUTS: dict[str, float] = {"churn_soak": 3600.0, "sharing_trace": 3600.0}
JSON_ROWS = {
    "decision_scaling",
    "kwok_workloads",
    "placement_quality",
    "resource_use",
    "sharing_trace",
}
ORDER = list(ARGS)
#: Modules that run other benchmarks themselves, each with a make target of its own: not run
#: here (``scheduler_perf_suite``: ``make scheduler-perf``, about an hour).
SUITES = {"run_all", "scheduler_perf_suite"}
#: The generated block of the page lies between these lines; the rest is written by hand.
BEGIN = "<!-- bench:begin: written by `make bench` (benchmarks/run_all.py); edits here are lost -->"
END = "<!-- bench:end -->"
_VERDICT = re.compile(r"\b(target|goal)\b", re.IGNORECASE)
#: Lines worth a row in the summary, for benchmarks that print neither rows nor a verdict line.
KEY_LINES: dict[str, re.Pattern[str]] = {
    "gang_placement": re.compile(r"(topos median|fragmentation mean|in one leaf)"),
    "binding_throughput": re.compile(r"vs one bind at a time"),
    "kwok_throughput": re.compile(r"^[\d,]+ KWOK nodes"),
    "watch_events": re.compile(r"^(heartbeat|pod status)"),
    "churn_soak": re.compile(r"^(goal|violations by kind|leader failover)"),
}


@dataclass
class Outcome:
    name: str
    seconds: float
    rc: int
    output: str
    rows: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    table: str = ""

    @property
    def verdicts(self) -> list[str]:
        pattern = KEY_LINES.get(self.name, _VERDICT)
        lines = [line.strip() for line in self.output.splitlines() if pattern.search(line)]
        if not lines and self.output.strip():
            lines = [self.output.strip().splitlines()[-1].strip()]
        return lines


def discover() -> list[str]:
    found = sorted(
        p.stem
        for p in HERE.glob("*.py")
        if not p.stem.startswith("_")
        and p.stem not in SUITES
        and '__name__ == "__main__"' in p.read_text()  # helpers are not benchmarks
    )
    return [n for n in ORDER if n in found] + [n for n in found if n not in ORDER]


def run_one(name: str, timeout: float) -> Outcome:
    argv = [sys.executable, "-m", f"benchmarks.{name}", *ARGS.get(name, [])]
    if name in JSON_ROWS:
        argv.append("--json")
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )
        rc, out = proc.returncode, proc.stdout + (proc.stderr if proc.returncode else "")
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout or ""
        text = partial if isinstance(partial, str) else partial.decode(errors="replace")
        rc, out = -1, f"{text}\n(timed out after {timeout:.0f} s)"
    outcome = Outcome(name, time.perf_counter() - started, rc, out.rstrip())
    if name in JSON_ROWS and rc == 0:
        try:
            doc: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
            outcome.rows = [{k: str(v) for k, v in r.items()} for r in doc.get("rows", [])]
            outcome.notes = [str(n) for n in doc.get("notes", [])]
            outcome.table = str(doc.get("table", ""))
        except (json.JSONDecodeError, IndexError):
            pass
    return outcome


def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = psutil.virtual_memory().total / 2**30
    return {
        "CPU": cpu,
        "cores": f"{psutil.cpu_count(logical=False) or '?'} physical / {os.cpu_count()} logical",
        "memory": f"{mem:.0f} GiB",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "OS": f"{platform.system()} {platform.release()}",
    }


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(outcomes: Sequence[Outcome], info: dict[str, str], load: tuple[float, ...]) -> str:
    """The generated block: the run's date, commit, machine and load, a summary row per figure,
    each benchmark's command and duration, and a failed one's output."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Run on {now}, commit `{commit()}`: every figure in this block comes from that one run;",
        "baselines ran in the same run on the same input.",
        "",
        *[f"- **{k}**: {v}" for k, v in info.items()],
        f"- **load average** at start: {', '.join(f'{x:.1f}' for x in load)} "
        "(a shared machine: wall-clock figures include time other processes held the CPU)",
        "",
        "| benchmark | case | figure | Topos | baseline (same run) | goal |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        if o.rc != 0:
            lines.append(f"| {o.name} | | **failed** (exit {o.rc}) | | | |")
            continue
        for r in o.rows:
            lines.append(
                "| "
                + " | ".join(
                    _cell(x)
                    for x in (
                        o.name,
                        r.get("case", ""),
                        r.get("figure", ""),
                        r.get("topos", ""),
                        r.get("baseline", ""),
                        r.get("goal", ""),
                    )
                )
                + " |"
            )
        if not o.rows:
            for v in o.verdicts or ["(see output below)"]:
                lines.append(f"| {o.name} | | {_cell(v)} | | | |")
    lines += ["", "Each benchmark's command and duration in this run:", ""]
    for o in outcomes:
        argv = " ".join(ARGS.get(o.name, []))
        cmd = f"python -m benchmarks.{o.name} {argv}".rstrip()
        lines.append(f"- `{cmd}` — {o.seconds:.0f} s")
    for o in outcomes:
        if o.rc != 0:
            lines += ["", f"#### {o.name} failed (exit {o.rc})", "", "```text"]
            lines += [o.output.rstrip() or "(no output)", "```"]
    return "\n".join(lines).rstrip() + "\n"


class PageError(ValueError):
    """The page to write into lacks its markers (the message names the file and the marker)."""


#: A generated block's opening and closing marker lines.
Markers = tuple[str, str]
BENCH: Markers = (BEGIN, END)


def _bounds(page: str, where: str, markers: Markers = BENCH) -> tuple[int, int]:
    """Where the generated block of ``page`` starts and ends (after the opening marker, at the
    closing one)."""
    begin, end_marker = markers
    for marker in markers:
        count = page.count(marker)
        if count != 1:
            found = "not found" if count == 0 else f"found {count} times"
            raise PageError(f"{where}: marker {marker!r} {found}; it must appear once")
    start, end = page.index(begin) + len(begin), page.index(end_marker)
    if end < start:
        raise PageError(f"{where}: marker {end_marker!r} comes before {begin!r}")
    return start, end


def check_page(path: Path, markers: Markers = BENCH) -> None:
    """Refuse, before any benchmark runs, a page the run could not be written into."""
    if path.exists():
        _bounds(path.read_text(), str(path), markers)


def splice(page: str, block: str, where: str = "the page", markers: Markers = BENCH) -> str:
    """``page`` with the text between its markers replaced by ``block``; the rest unchanged."""
    start, end = _bounds(page, where, markers)
    return page[:start] + "\n" + block.rstrip() + "\n" + page[end:]


def write_page(path: Path, block: str, markers: Markers = BENCH) -> None:
    """Write ``block`` between the markers of ``path`` (a new file: the markers and ``block``)."""
    page = path.read_text() if path.exists() else f"{markers[0]}\n{markers[1]}\n"
    path.write_text(splice(page, block, str(path), markers))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated benchmark names")
    ap.add_argument("--output", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args(argv)
    if args.output != "-":
        try:
            check_page(Path(args.output))
        except PageError as e:
            print(e, file=sys.stderr)
            return 2
    names = discover()
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            print(f"unknown benchmark {unknown[0]!r}; known: {', '.join(names)}", file=sys.stderr)
            return 2
        names = wanted
    info = machine()
    load = os.getloadavg()
    print(f"machine: {info['CPU']}, {info['cores']}, {info['Python']}", file=sys.stderr)
    outcomes: list[Outcome] = []
    for name in names:
        print(f"[{len(outcomes) + 1}/{len(names)}] {name} …", file=sys.stderr, flush=True)
        o = run_one(name, max(args.timeout, TIMEOUTS.get(name, 0.0)))
        status = "ok" if o.rc == 0 else f"FAILED (exit {o.rc})"
        if args.output != "-":
            print(o.output.rstrip(), flush=True)
        print(f"    {status} in {o.seconds:.0f} s", file=sys.stderr, flush=True)
        outcomes.append(o)
    text = render(outcomes, info, load)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        write_page(Path(args.output), text)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0 if all(o.rc == 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
