"""``make bench`` (``benchmarks.run_all``): which benchmarks it runs and the page it writes — the
machine, a summary row per figure (or the verdict line of benchmarks that print text), failures
marked, and each benchmark's output. Nothing here runs a benchmark or asserts a time."""

from __future__ import annotations

from pathlib import Path

from benchmarks.run_all import Outcome, discover, machine, render

HERE = Path(__file__).resolve().parents[1]


def test_discovers_benchmarks_not_helpers() -> None:
    names = discover()
    assert "run_all" not in names
    assert {"decision_scaling", "placement_quality", "resource_use"} <= set(names)
    for name in names:
        assert '__name__ == "__main__"' in (HERE / f"{name}.py").read_text()


def test_page_has_machine_rows_verdicts_and_failures() -> None:
    rows = [
        {
            "case": "1,000 nodes",
            "figure": "decision p50 / p99 (wall)",
            "topos": "1.10 / 9.00 ms",
            "baseline": "0.90 / 4.00 ms (first-fit)",
            "goal": "",
        }
    ]
    outcomes = [
        Outcome("decision_scaling", 12.0, 0, "", rows=rows, notes=["load average 1.0"]),
        Outcome("discovery", 3.0, 0, "x\ntarget < 50 ms per discovery (p50): OK\n"),
        Outcome("ingest", 1.0, 2, "Traceback: boom"),
    ]
    info = machine()
    page = render(outcomes, info, (1.0, 0.5, 0.2))
    assert "## Machine" in page
    assert info["CPU"] in page
    assert info["Python"] in page
    assert "| benchmark | case | figure | Topos | baseline (same run) | goal |" in page
    assert (
        "| decision_scaling | 1,000 nodes | decision p50 / p99 (wall) | 1.10 / 9.00 ms | "
        "0.90 / 4.00 ms (first-fit) |  |"
    ) in page
    assert "| discovery | | target < 50 ms per discovery (p50): OK | | | |" in page
    assert "| ingest | | **failed** (exit 2) | | | |" in page
    assert "Traceback: boom" in page  # the failure's output is kept for whoever reads the page
    assert "## Profiling notes" in page
