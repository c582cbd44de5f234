"""Readable comparison tables of simulation summaries."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.sim.metrics import Summary

__all__ = ["format_duration", "format_table"]


def format_duration(seconds: float) -> str:
    """``42s``, ``12.5m``, ``3.2h``, ``2.1d``."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


_BARS = " ▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float]) -> str:
    """One character per value in 0–1 (``▁`` … ``█``)."""
    out = []
    for v in values:
        i = round(max(0.0, min(1.0, v)) * (len(_BARS) - 1))
        out.append(_BARS[i])
    return "".join(out)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
    lines = [
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w)
            for i, (h, w) in enumerate(zip(header, widths, strict=True))
        )
    ]
    for r in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    return lines


def format_table(summaries: Sequence[Summary]) -> str:
    """Three blocks: time (JCT, waiting), use (utilisation, fragmentation, timeline) and
    locality (best link class, gangs in one leaf, modelled stretch), one row per policy."""
    if not summaries:
        return ""
    time_rows = [
        [
            s.policy,
            f"{s.placed}/{s.jobs}",
            format_duration(s.jct_mean_s),
            format_duration(s.jct_p50_s),
            format_duration(s.jct_p95_s),
            format_duration(s.wait_mean_s),
            format_duration(s.wait_p95_s),
            format_duration(s.makespan_s),
        ]
        for s in summaries
    ]
    use_rows = [
        [
            s.policy,
            _pct(s.utilisation),
            _pct(s.mig_utilisation),
            f"{s.fragmentation_gpus:.1f}",
            _pct(s.fragmentation_share),
            sparkline(s.timeline),
        ]
        for s in summaries
    ]
    loc_rows = [
        [
            s.policy,
            f"{_pct(s.best_link_share)} of {s.multi_gpu_pods}",
            f"{_pct(s.gangs_one_leaf_share)} of {s.gangs}",
            f"{_pct(s.gangs_one_spine_share)}",
            f"×{s.multi_gpu_stretch:.3f}",
        ]
        for s in summaries
    ]
    lines = ["Job time (modelled run time, see docs/simulate.md)"]
    lines += _table(
        ["policy", "placed", "JCT mean", "JCT p50", "JCT p95", "wait mean", "wait p95", "makespan"],
        time_rows,
    )
    lines += ["", "GPU use (time-weighted)"]
    lines += _table(
        ["policy", "GPU util", "MIG util", "idle GPUs stranded", "of idle", "util over time"],
        use_rows,
    )
    lines += ["", "Locality"]
    lines += _table(
        [
            "policy",
            "multi-GPU pods on best link",
            "gangs in one leaf",
            "in one spine",
            "comm. stretch",
        ],
        loc_rows,
    )
    engine_rows = [
        [
            s.policy,
            f"{s.attempts:,}",
            f"{s.restarts:,}",
            f"{s.speed:,.0f}×" if s.speed else "-",
        ]
        for s in summaries
    ]
    lines += ["", "Engine (the production scheduler on a simulated clock)"]
    lines += _table(
        ["policy", "attempts", "jobs restarted (preempted)", "simulated s per wall s"],
        engine_rows,
    )
    return "\n".join(lines) + "\n"
