"""The in-memory preemption benchmark stays runnable and does what PreemptionBasic asks: every
high-priority pod is bound after one preemption of exactly three low-priority pods (no timing is
asserted); a bad size is refused naming the option and the value."""

from __future__ import annotations

import re

import pytest

from benchmarks import preemption_memory as bench


def test_each_pod_preempts_once_evicting_three(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--nodes", "12", "--delay", "0.05", "--timeout", "60"]) == 0
    out = capsys.readouterr().out
    found = re.search(r"(\d+)/12 bound .* (\d+) evictions, (\d+) preemptions", out)
    assert found is not None, out
    assert found.groups() == ("12", "36", "12")


def test_a_bad_size_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--nodes", "0"])
    assert "--nodes: 0 is not a positive count" in capsys.readouterr().err
