"""The decision-latency benchmark stays runnable, and on its mixed workload Topos puts at least
as many multi-GPU pods on all-NVLink GPU sets as first-fit does (no timing is asserted)."""

from __future__ import annotations

import re

import pytest

from benchmarks import decision_latency as bench


def test_benchmark_runs_small_and_beats_first_fit_on_link_quality(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--nodes", "40", "--pods", "150"]) == 0
    out = capsys.readouterr().out
    shares = dict(re.findall(r"^(topos|first-fit)\s.*all-NVLink sets\s+([\d.]+)%", out, re.M))
    assert set(shares) == {"topos", "first-fit"}, out
    assert float(shares["topos"]) >= float(shares["first-fit"])
    assert "target p99 < 5 ms per pod" in out
