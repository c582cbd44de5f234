"""The figures of a sharing-trace run: a row per policy (median over seeds, min–max), the
curve as text, the verdict on the issue's goal, and rows for ``benchmarks.run_all``."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "CURVE_AT",
    "CURVE_POINTS",
    "Run",
    "Summary",
    "curve",
    "curve_table",
    "goal",
    "json_rows",
    "summarise",
    "table",
]

CURVE_POINTS: Final = 131  # 0 … 130 % of capacity


@dataclass(frozen=True, slots=True)
class Run:
    """One policy over one seed's arrivals."""

    policy: str
    seed: int
    arrived: int  # pods
    placed: int
    seconds: float  # the replay's CPU time, all pods
    curve: tuple[float, ...]  # unallocated share at 0 … 130 % arrived
    violations: tuple[str, ...] = ()

    @property
    def at_capacity(self) -> float:
        return self.curve[100]

    @property
    def us_per_decision(self) -> float:
        return 1e6 * self.seconds / self.arrived if self.arrived else 0.0


def curve(demands: Sequence[int], allocated: Sequence[int], capacity: int) -> tuple[float, ...]:
    """The paper's metric: the unallocated share of ``capacity`` at each whole percent of
    arrived demand, from each arrival's demand and the allocated total after it (linear between
    arrivals); flat past the last arrival."""
    points: list[float] = []
    arrived_prev, unalloc_prev = 0.0, 1.0
    arrived = 0
    for demand, alloc in zip(demands, allocated, strict=True):
        arrived += demand
        x, u = arrived / capacity, 1.0 - alloc / capacity
        while len(points) < CURVE_POINTS and len(points) / 100 <= x:
            at = len(points) / 100
            if x == arrived_prev:
                points.append(u)
            else:
                points.append(
                    unalloc_prev + (u - unalloc_prev) * (at - arrived_prev) / (x - arrived_prev)
                )
        arrived_prev, unalloc_prev = x, u
    while len(points) < CURVE_POINTS:
        points.append(unalloc_prev)
    return tuple(points)


#: Arrived demand (% of capacity) the printed curve shows.
CURVE_AT: Final = (0, 20, 40, 60, 70, 80, 85, 90, 95, 100, 105, 110, 120, 130)
TOPOS_WHOLE: Final = "topos, whole GPU per fraction"
TOPOS_FRACTION: Final = "topos, fractions"


@dataclass(frozen=True, slots=True)
class Summary:
    policy: str
    runs: tuple[Run, ...]

    @property
    def at_capacity(self) -> tuple[float, float, float]:
        """Median, min and max over seeds of the unallocated share at 100 % arrived."""
        values = [r.at_capacity for r in self.runs]
        return statistics.median(values), min(values), max(values)

    @property
    def placed(self) -> tuple[float, float]:
        """Median placed pods and median arrived pods."""
        return (
            statistics.median(r.placed for r in self.runs),
            statistics.median(r.arrived for r in self.runs),
        )

    @property
    def us_per_decision(self) -> float:
        return statistics.median(r.us_per_decision for r in self.runs)

    @property
    def curve(self) -> list[float]:
        """Median over seeds at each percent of arrived demand."""
        return [statistics.median(c) for c in zip(*(r.curve for r in self.runs), strict=True)]

    @property
    def violations(self) -> list[str]:
        return [v for r in self.runs for v in r.violations]


def summarise(runs: Mapping[str, Sequence[Run]]) -> list[Summary]:
    """Best (lowest median unallocated share) first."""
    out = [Summary(name, tuple(rs)) for name, rs in runs.items() if rs]
    return sorted(out, key=lambda s: s.at_capacity[0])


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _width(summaries: Sequence[Summary]) -> int:
    return max([32, *(len(s.policy) for s in summaries)])


def table(summaries: Sequence[Summary]) -> str:
    seeds = max((len(s.runs) for s in summaries), default=0)
    head = f"unallocated at 100 % (median [min–max], {seeds} seeds)"
    w = _width(summaries)
    lines = [f"{'policy':{w}s}  {head:50s}  {'placed pods (median)':22s}  µs/decision"]
    for s in summaries:
        med, lo, hi = s.at_capacity
        placed, arrived = s.placed
        flag = f"  VIOLATIONS: {s.violations[0]} (+{len(s.violations) - 1})" if s.violations else ""
        lines.append(
            f"{s.policy:{w}s}  {f'{_pct(med)} [{_pct(lo)}–{_pct(hi)}]':50s}  "
            f"{f'{placed:,.0f} of {arrived:,.0f}':22s}  {s.us_per_decision:,.0f}{flag}"
        )
    return "\n".join(lines)


def curve_table(summaries: Sequence[Summary]) -> str:
    w = _width(summaries)
    lines = [
        "unallocated GPU share (median %) by arrived GPU demand (% of capacity):",
        f"{'arrived':{w}s}" + "".join(f"{x:>6d}" for x in CURVE_AT),
    ]
    for s in summaries:
        c = s.curve
        lines.append(f"{s.policy:{w}s}" + "".join(f"{100 * c[x]:6.1f}" for x in CURVE_AT))
    return "\n".join(lines)


def goal(summaries: Sequence[Summary]) -> str:
    """The issue's goal: Topos sharing ≤ 0.6 × best-fit and below FGD, at no more CPU per pod
    than Topos giving each share a whole GPU (both on the engine, in this run)."""
    by = {s.policy: s for s in summaries}
    best_fit, fgd = by.get("best-fit"), by.get("fgd")
    topos = by.get(TOPOS_FRACTION)
    if topos is None or best_fit is None or fgd is None:
        return "goal: Topos ≤ 0.6 × best-fit and < FGD — not run (needs topos, best-fit, fgd)"
    t, b, f = topos.at_capacity[0], best_fit.at_capacity[0], fgd.at_capacity[0]
    mine, today = topos, by.get(TOPOS_WHOLE)
    speed_ok, said = True, ""
    if mine is not None and today is not None and today.us_per_decision > 0:
        speed_ok = mine.us_per_decision <= today.us_per_decision
        said = (
            f"; {mine.policy} {mine.us_per_decision:,.0f} µs/decision against "
            f"{today.policy} {today.us_per_decision:,.0f} "
            f"({mine.us_per_decision / today.us_per_decision:.2f}×)"
        )
    met = t <= 0.6 * b and t < f and speed_ok and not topos.violations
    return (
        f"goal: Topos ≤ 0.6 × best-fit ({_pct(0.6 * b)}) and < FGD ({_pct(f)}) at no more "
        f"µs/decision than today — {'met' if met else 'not met'} (Topos {_pct(t)}{said})"
    )


def json_rows(summaries: Sequence[Summary], case: str) -> list[dict[str, Any]]:
    rows = []
    topos = [s for s in summaries if s.policy.startswith("topos")]
    others = [s for s in summaries if not s.policy.startswith("topos")]
    figures: tuple[tuple[str, Callable[[Summary], str]], ...] = (
        ("GPU unallocated at 100 % arrived (median)", lambda s: _pct(s.at_capacity[0])),
        ("µs per decision (median)", lambda s: f"{s.us_per_decision:,.0f}"),
    )
    for figure, fmt in figures:
        rows.append(
            {
                "case": case,
                "figure": figure,
                "topos": ", ".join(f"{fmt(s)} ({s.policy[7:]})" for s in topos),
                "baseline": ", ".join(f"{fmt(s)} ({s.policy})" for s in others),
                "goal": "lower is better",
            }
        )
    return rows
