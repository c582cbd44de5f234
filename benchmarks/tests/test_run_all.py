"""``make bench`` (``benchmarks.run_all``): which benchmarks it runs and the block it writes — the
machine, a summary row per figure (or the verdict line of benchmarks that print text), failures
marked, each benchmark's command, and a failed one's output — between the markers of
docs/benchmarks.md, keeping the hand-written rest of the page. Nothing here runs a benchmark or
asserts a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import run_all
from benchmarks.run_all import BEGIN, END, Outcome, discover, machine, render, write_page

HERE = Path(__file__).resolve().parents[1]
PAGE = HERE.parent / "docs" / "benchmarks.md"


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
    assert "- `python -m benchmarks.discovery" in page
    assert "\nx\n" not in page  # a benchmark that passed has its figures in the table alone
    assert "load average** at start: 1.0, 0.5, 0.2" in page


def _block(figure: str) -> str:
    rows = [{"case": "c", "figure": figure, "topos": "1", "baseline": "2", "goal": ""}]
    return render([Outcome("decision_scaling", 1.0, 0, "", rows=rows)], machine(), (0.1,) * 3)


def test_a_run_replaces_only_its_block_and_keeps_the_hand_written_page(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    hand_before = "# Benchmarks\n\n## Current figures\n\n| by hand |\n\n"
    hand_after = "\n## Where Topos is behind\n\n- by hand too\n"
    page.write_text(f"{hand_before}{BEGIN}\nold run\n{END}\n{hand_after}")
    write_page(page, _block("first figure"))
    write_page(page, _block("second figure"))  # a second run replaces the first
    text = page.read_text()
    assert text.startswith(hand_before + BEGIN + "\n")
    assert text.endswith(END + "\n" + hand_after)
    assert "second figure" in text
    assert "first figure" not in text
    assert "old run" not in text


def test_the_project_page_has_its_markers_once_and_in_order() -> None:
    text = PAGE.read_text()
    assert text.count(BEGIN) == 1
    assert text.count(END) == 1
    assert text.index(BEGIN) < text.index(END)
    assert "## Sizes `make bench` does not run" in text[: text.index(BEGIN)]  # the table by hand


@pytest.mark.parametrize(
    ("body", "marker", "says"),
    [
        ("# Benchmarks\n\nby hand\n", BEGIN, "not found"),
        (f"{BEGIN}\n{BEGIN}\n{END}\n", BEGIN, "found 2 times"),
        (f"{END}\nby hand\n{BEGIN}\n", END, "comes before"),
    ],
)
def test_a_page_without_its_markers_is_refused_before_any_benchmark_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    body: str,
    marker: str,
    says: str,
) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(body)
    ran: list[str] = []
    monkeypatch.setattr(run_all, "run_one", lambda name, timeout: ran.append(name))
    assert run_all.main(["--only", "discovery", "--output", str(page)]) == 2
    err = capsys.readouterr().err
    assert str(page) in err
    assert marker in err
    assert says in err
    assert ran == []  # nothing ran
    assert page.read_text() == body  # and the page is as it was


def test_a_new_file_gets_the_markers_and_the_run(tmp_path: Path) -> None:
    page = tmp_path / "new.md"
    write_page(page, _block("a figure"))
    text = page.read_text()
    assert text.startswith(BEGIN + "\n")
    assert text.endswith(END + "\n")
    assert "a figure" in text
