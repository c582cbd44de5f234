"""The crowded-node view benchmark stays runnable, and after binds seen out of order and pods
leaving, its node is the one a view built afresh gives (no timing is asserted)."""

from __future__ import annotations

import pytest

from benchmarks import view_churn as bench


@pytest.mark.parametrize("leave", [0, 2])
def test_benchmark_runs_small_and_ends_as_a_view_built_afresh(
    leave: int, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--bound", "50", "--pods", "200", "--in-flight", "8", "--leave", str(leave)]
    assert bench.main([*argv, "--repeat", "1"]) == 0
    assert "us CPU per pod" in capsys.readouterr().out
