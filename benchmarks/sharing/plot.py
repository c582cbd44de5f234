"""The curve as a PNG (matplotlib, the optional ``bench`` extra): unallocated GPU share against
arrived demand, the whole range and the part where the policies differ, with the ideal line
(nothing unallocated that was asked for)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from benchmarks.sharing.report import Summary

__all__ = ["write_png"]


def write_png(summaries: Sequence[Summary], path: Path, title: str) -> str | None:
    """Write the plot; returns why not when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]')"
    xs = list(range(len(summaries[0].curve))) if summaries else []
    fig, axes = plt.subplots(1, 2, figsize=(15, 5), dpi=110)
    styles = ["-", "--", "-.", ":"]
    for ax, (x0, y1) in zip(axes, ((0, 100), (75, 25)), strict=True):
        ax.plot(xs, [max(0, 100 - x) for x in xs], color="grey", lw=1, ls=":", label="ideal")
        for i, s in enumerate(summaries):
            strong = s.policy.startswith(("topos", "fgd"))
            ax.plot(
                xs,
                [100 * v for v in s.curve],
                lw=2.4 if strong else 1.6,
                ls=styles[i % len(styles)],
                label=f"{s.policy} ({100 * s.at_capacity[0]:.1f} %)",
            )
        ax.set_xlim(x0, xs[-1] if xs else 130)
        ax.set_ylim(0, y1)
        ax.axvline(100, color="black", lw=0.8, alpha=0.5)
        ax.grid(alpha=0.35)
        ax.set_xlabel("arrived GPU demand (% of cluster GPU capacity)")
        ax.set_ylabel("GPU capacity unallocated (%)")
    axes[0].set_title("whole run")
    axes[1].set_title("from 75 % arrived (value at 100 % in the legend)")
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=9, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None
