"""The gated-pods benchmark stays runnable: the gated pods are parked, never bound, and every
ungated pod is bound (no timing is asserted)."""

from __future__ import annotations

import pytest

from benchmarks import gated_engine as bench


def test_benchmark_runs_small_binding_only_the_ungated_pods(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--gated", "20", "--pods", "30", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "    20 gated, 30 pods onto one node:" in out
    assert "     0 gated, 30 pods onto one node:" in out
