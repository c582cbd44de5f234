"""``make scheduler-perf`` (``benchmarks.scheduler_perf_suite``): every case it runs is one the
runner reads from upstream's YAML, each case's result is kept and turned into a table row against
the goal, a case run again replaces only its own row, and bad input is refused before anything
runs. Nothing here runs a control plane or asserts a time."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from benchmarks import run_all
from benchmarks import scheduler_perf_suite as suite
from benchmarks import scheduler_perf_workload as workload_yaml


@pytest.mark.parametrize("case", [*suite.SUITE, *suite.LARGE], ids=lambda c: c.name)
def test_every_case_is_one_the_runner_reads(perf_dir: Path, case: suite.Case) -> None:
    params = workload_yaml.parse_params([f"{k}={v}" for k, v in case.params])
    work = workload_yaml.load_workload(perf_dir / case.config, case.case, case.workload, params)
    assert work.measured_pods > 0


def test_case_names_are_unique_and_the_large_ones_run_only_when_named() -> None:
    names = [c.name for c in (*suite.SUITE, *suite.LARGE)]
    assert len(names) == len(set(names))
    assert suite.select("") == list(suite.SUITE)
    assert {c.name for c in suite.LARGE}.isdisjoint(c.name for c in suite.select(""))
    assert suite.select("basic-5000,pod-add") == [suite.CASES["basic-5000"], suite.CASES["pod-add"]]
    with pytest.raises(KeyError, match="unknown case 'pod-ad'"):
        suite.select("pod-add,pod-ad")


def test_make_bench_leaves_the_suite_to_its_own_target() -> None:
    assert "scheduler_perf_suite" not in run_all.discover()
    assert "scheduler_perf" in run_all.discover()


def _run(scheduler: str, rate: float, cpu: float, *, events_after: float = 0.0) -> dict[str, Any]:
    return {
        "scheduler": scheduler,
        "bound": 1000,
        "pods_per_s": rate,
        "kept_up": 0.97,
        "cpu_ms_per_pod": cpu,
        "events_after_s": events_after,
        "cpu_events_s": 1.2 if events_after else 0.0,
        "timed_out": False,
    }


def _result(name: str, *, pods: float, cpu: float, rc: int = 0) -> dict[str, Any]:
    report = {
        "runs": [
            _run("kube-scheduler", 300.0, 0.7),
            _run("topos", 300.0 * pods, 0.7 * cpu, events_after=0.9),
        ],
        "median": {"pods_per_s": pods, "cpu_per_pod": cpu, "requests_per_pod": 1.0, "kept_up": 1.1},
    }
    return {
        "name": name,
        "started": "2026-12-01 23:00 UTC",
        "commit": "abc1234",
        "load": [0.5, 2.5],
        "seconds": 60,
        "rc": rc,
        "report": None if rc else report,
    }


def test_a_row_says_which_goal_is_missed() -> None:
    results = {
        "basic": _result("basic", pods=1.02, cpu=0.76),
        "daemonset": _result("daemonset", pods=0.92, cpu=1.33),
        "dra-claim": _result("dra-claim", pods=2.07, cpu=0.9),  # a DRA case: pods/s alone
        "pod-add": _result("pod-add", pods=0.0, cpu=0.0, rc=1),
    }
    results["daemonset"]["report"]["runs"][1]["timed_out"] = True  # Topos' run stopped short
    block = suite.render(results, [*suite.SUITE, *suite.LARGE])
    rows = {line.split(" | ")[0]: line for line in block.splitlines() if line.startswith("| ")}
    basic = rows["| SchedulingBasic/500Nodes ×2"]
    assert "**1.02×**" in basic
    assert "**0.76×**" in basic
    assert "| met |" in basic
    assert "300.0 (97 %), 0.70 ms" in basic  # kube-scheduler's side
    assert "0.53 ms (1.20 ms to its Events)" in basic  # Topos' CPU, and to its Events written
    daemonset = rows["| SchedulingDaemonset/5Nodes (initNodes=500, measurePods=1000) ×2"]
    assert "| pods/s missed, CPU missed (a run timed out) |" in daemonset
    assert "timed out" not in basic
    assert "| met |" in rows["| SchedulingWithResourceClaim/5000pods_500nodes"]
    assert "**failed** (exit 1)" in rows["| EventHandlingPodAdd/1000Pods (measurePods=100)"]
    assert "2026-12-01 23:00 UTC, `abc1234`, load 0.5 → 2.5, 60 s" in basic
    order = [name for name in rows if not name.startswith("| case")]
    assert order.index("| SchedulingBasic/500Nodes ×2") < order.index(
        "| EventHandlingPodAdd/1000Pods (measurePods=100)"
    )
    assert "Of 3 cases: pods/s met in 2, CPU per pod in 2, both in 2." in block


def _fake_runner(tmp_path: Path, stdout: str, rc: int) -> str:
    """An executable standing in for ``python``: prints ``stdout`` and exits ``rc``."""
    script = tmp_path / "fake-python"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{stdout}\nEOF\nexit {rc}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_a_case_run_is_kept_with_its_command_and_report(tmp_path: Path) -> None:
    report = {"runs": [_run("kube-scheduler", 300, 0.7), _run("topos", 310, 0.5)], "rounds": []}
    python = _fake_runner(tmp_path, "scheduler_perf: warm-up done\n" + json.dumps(report), 0)
    case = suite.CASES["pod-add"]
    result = suite.run_case(case, tmp_path / "out", python=python)
    kept = json.loads((tmp_path / "out" / "pod-add.json").read_text())
    assert kept == result
    assert kept["rc"] == 0
    assert kept["report"] == report
    assert kept["command"].endswith(
        "--case EventHandlingPodAdd --workload 1000Pods "
        "--param measurePods=100 --repeat 1 --timeout 600"
    )


def test_a_failed_case_is_kept_as_failed(tmp_path: Path) -> None:
    python = _fake_runner(tmp_path, "scheduler_perf: no such workload", 2)
    result = suite.run_case(suite.CASES["basic"], tmp_path / "out", python=python)
    assert result["rc"] == 2
    assert result["report"] is None
    block = suite.render(suite.load_results(tmp_path / "out", suite.SUITE), suite.SUITE)
    assert "**failed** (exit 2)" in block


def test_render_replaces_only_the_block_and_a_page_without_markers_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results"
    out.mkdir()
    (out / "basic.json").write_text(json.dumps(_result("basic", pods=1.1, cpu=0.7)))
    (out / "pod-add.json").write_text("{not json")  # named and skipped, the rest still written
    page = tmp_path / "benchmarks.md"
    begin, end = suite.MARKERS
    page.write_text(f"# Benchmarks\n\nby hand\n\n{begin}\nold table\n{end}\n\nby hand too\n")
    assert suite.main(["--render", "--out", str(out), "--output", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nby hand\n")
    assert text.endswith("\nby hand too\n")
    assert "old table" not in text
    assert "| SchedulingBasic/500Nodes ×2 |" in text
    assert "pod-add.json: not a result" in capsys.readouterr().err

    bare = tmp_path / "bare.md"
    bare.write_text("# no markers here\n")
    assert suite.main(["--render", "--out", str(out), "--output", str(bare)]) == 2
    assert bare.read_text() == "# no markers here\n"
    assert "scheduler_perf:begin" in capsys.readouterr().err
    assert suite.main(["--cases", "nope", "--output", str(page)]) == 2
    assert "unknown case 'nope'" in capsys.readouterr().err
