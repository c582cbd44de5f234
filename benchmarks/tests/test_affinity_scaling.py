"""affinity_scaling compares like with like: the scanning baseline and the indexed plugins place
every pod on the same node under kube's adaptive ``percentageOfNodesToScore`` (the indexed
plugins' candidate nodes are visited from kube's rotating start, as kube visits every node)."""

from __future__ import annotations

import pytest

from benchmarks.affinity_scaling import CASES, run
from coordinator.core.registry import build_framework
from coordinator.sim.baselines.scan import scan_framework


@pytest.mark.parametrize("case", ["anti-affinity", "spread-host"])
def test_scan_and_indexed_place_alike_when_sampling(case: str) -> None:
    scan = run(CASES[case](300), scan_framework(), 10**6)
    indexed = run(CASES[case](300), build_framework(), 10**6)
    assert "" not in indexed.placed
    assert indexed.placed == scan.placed
    assert indexed.check == scan.check
