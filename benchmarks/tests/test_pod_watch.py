"""The pod-watch benchmark stays runnable: every pod it feeds leaves the queue when bound and
is counted on its node, and a pod that only started is applied as its status (no timing is
asserted)."""

from __future__ import annotations

import pytest

from benchmarks import pod_watch as bench


def test_benchmark_runs_small_with_every_step(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--nodes", "5", "--pods", "40", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("40 pods, 5 nodes, median of 1 rounds")
    for step in (*bench.STEPS, "total"):
        assert f"\n{step} " in out
