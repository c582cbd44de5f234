"""``benchmarks.kai_gangs``: what counts as an unschedulable verdict, bad arguments refused before
anything starts, and — on the real control plane with KWOK — that a 16-node run finishes all three
KAI cases for both schedulers with figures that exist and make sense. Nothing here asserts a
speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.kai_gangs import CASES, main, said_unschedulable
from devcluster.binaries import BinariesUnavailable, ensure
from devcluster.subprocess_env import subprocess_env

ROOT = Path(__file__).resolve().parents[2]


def _pod(name: str, group: str, reason: str, message: str) -> dict[str, object]:
    condition = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
    return {
        "metadata": {"name": name, "labels": {"kai-bench/group": group}},
        "status": {"conditions": [condition]},
    }


def test_only_a_verdict_on_the_gang_itself_counts_as_unschedulable() -> None:
    said = said_unschedulable("PodScheduled", "stuck")
    waiting = _pod("stuck-0", "stuck", "Unschedulable", "waiting for all 10 pods to exist")
    assert not said({"stuck-0": waiting})  # a wait for members is no verdict
    other = _pod("topo-0", "topo", "Unschedulable", "0/16 nodes are available")
    assert not said({"topo-0": other})  # another gang's
    pending = _pod("stuck-1", "stuck", "SchedulerError", "0/16 nodes are available")
    assert not said({"stuck-1": pending})
    verdict = _pod("stuck-2", "stuck", "Unschedulable", "0/16 nodes are available")
    assert said({"stuck-0": waiting, "topo-0": other, "stuck-2": verdict})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "8"], "--nodes must be at least 16 (one node a leaf), got 8"),
        (["--cases", "topology,preempt"], "--cases: unknown preempt"),
        (["--schedulers", "kai"], "--schedulers: unknown kai"),
    ],
)
def test_bad_arguments_are_refused_naming_the_flag_and_value(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


@pytest.mark.kube
def test_a_16_node_run_gives_every_case_for_both_schedulers() -> None:
    try:
        ensure(extra=True, log=False)
    except BinariesUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and kube-scheduler or kwok unavailable: {exc}", pytrace=False)
        pytest.skip(f"kube-scheduler or kwok unavailable: {exc}")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.kai_gangs",
            *("--nodes", "16", "--timeout", "120", "--json"),
        ],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    out = json.loads(done.stdout)
    results = {(r["case"], r["scheduler"]): r for r in out["results"]}
    assert set(results) == {(c, s) for c in CASES for s in ("kube-scheduler", "topos")}
    for r in results.values():
        assert r["seconds"] is not None, r
        assert 0 < r["seconds"] < 120, r
        assert r["checks"] == [], r
    assert [r["pods"] for c in CASES for r in [results[c, "topos"]]] == [16, 10, 16]
    assert "in spine-" in results["topology", "topos"]["note"]  # one spine, as required
    assert "16 of 16 fillers gone" in results["reclaim", "topos"]["note"]
    assert "16 of 16 fillers gone" in results["reclaim", "kube-scheduler"]["note"]
    # Topos names the room it looked for; the verdict came from the gang's own objects.
    assert "nodes are available" in results["unschedulable", "topos"]["note"]
    rows = {r["case"].split(",")[0]: r for r in out["rows"]}
    assert set(rows) == {f"KAI {c}" for c in CASES}
    assert all(
        "KAI published" in r["baseline"] and "better than KAI" in r["topos"] for r in rows.values()
    )
