"""The one-node view benchmark stays runnable, and once every bind is seen the node holds each
pod once with no assumption left (no timing is asserted)."""

from __future__ import annotations

import pytest

from benchmarks import view_one_node as bench


def test_benchmark_runs_small_and_every_pod_ends_counted_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--pods", "60", "--others", "5", "--lag", "7", "--repeat", "1"]) == 0
    assert "µs CPU per pod" in capsys.readouterr().out
