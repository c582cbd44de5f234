"""``benchmarks.sharing_trace`` at a tiny scale, one seed: the workload has the trace's shape, the
metric reads what was allocated, and what must hold whatever the seed holds — GPU milli
conserved, no node or GPU over-committed, sharing beating a whole GPU per fractional pod.
Nothing here asserts a time or a ranking between baselines that chance could reverse."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from benchmarks.sharing.cluster import Choice, Cluster
from benchmarks.sharing.fgd import Fgd
from benchmarks.sharing.policies import BASELINES, best_fit
from benchmarks.sharing.replay import curve, replay_baseline
from benchmarks.sharing.report import TOPOS_FRACTION, TOPOS_WHOLE
from benchmarks.sharing.topos_arm import FRACTION_KEY, Ledger, fraction_support, pod_object
from benchmarks.sharing.topos_arm import replay as topos_replay
from benchmarks.sharing.trace import (
    MILLI,
    NodeShape,
    PodShape,
    cluster,
    pod_shapes,
    popularity,
    workload,
)
from benchmarks.sharing_trace import run
from coordinator.core.podspec.parse import PodRequest, parse_pod

SCALE = 0.05  # 61 nodes, 313 GPUs


def test_the_workload_has_the_published_shape() -> None:
    nodes = cluster(1.0)
    assert (len(nodes), sum(n.shape.gpus for n in nodes)) == (1213, 6212)
    kinds: dict[str, int] = {}
    for shape, count in pod_shapes():
        kinds[shape.kind] = kinds.get(shape.kind, 0) + count
    assert kinds == {"fractional": 3078, "1 GPU": 3911, "2-8 GPUs": 75, "cpu-only": 1088}
    work = workload(SCALE, seed=3)
    assert work == workload(SCALE, seed=3)
    assert work.pods != workload(SCALE, seed=4).pods
    arrived = sum(p.demand for p in work.pods)
    assert 1.25 * work.capacity < arrived <= 1.3 * work.capacity


def test_fragmentation_is_what_each_shape_cannot_use() -> None:
    whole, quarter = PodShape(1, MILLI, 1000, 0), PodShape(1, 250, 1000, 0)
    cpu_only = PodShape(0, 0, 1000, 0)
    free = (0, 200, 500)  # sorted free milli per GPU
    assert Fgd([(whole, 1.0)]).fragmentation(free, 8000) == 700  # no GPU takes a whole pod
    assert Fgd([(quarter, 1.0)]).fragmentation(free, 8000) == 200  # only the 200 is lost
    assert Fgd([(quarter, 1.0)]).fragmentation(free, 500) == 700  # too little CPU: all lost
    assert Fgd([(cpu_only, 1.0)]).fragmentation(free, 8000) == 700
    assert Fgd([(whole, 0.5), (quarter, 0.5)]).fragmentation(free, 8000) == 450


def test_the_metric_reads_the_allocated_share_where_arrivals_reach_capacity() -> None:
    assert curve([1000], [1000], 1000)[100] == 0.0
    assert curve([1000], [1000], 1000)[50] == pytest.approx(0.5)
    dropped = curve([400, 400, 400], [400, 800, 800], 1000)
    assert dropped[100] == pytest.approx(0.2)
    assert dropped[130] == pytest.approx(0.2)  # flat after the last arrival


@pytest.mark.parametrize("name", [*BASELINES, "fgd", "best-fit whole"])
def test_every_policy_conserves_gpus_and_overcommits_nothing(name: str) -> None:
    work = workload(SCALE, seed=0)
    if name == "fgd":
        result = replay_baseline(name, Fgd(popularity(pod_shapes())), work)
    elif name == "best-fit whole":
        result = replay_baseline(name, best_fit, work, whole=True)
    else:
        result = replay_baseline(name, BASELINES[name], work)
    assert result.violations == ()
    assert 0 < result.placed <= result.arrived == len(work.pods)
    assert all(0.0 <= u <= 1.0 for u in result.curve)
    assert list(result.curve) == sorted(result.curve, reverse=True)  # nothing ever leaves
    assert result.curve[0] == 1.0


def test_a_choice_that_does_not_fit_is_refused() -> None:
    c = Cluster(workload(SCALE, seed=0).nodes)
    two = next(n.index for n in c.nodes if len(n.free) == 2)
    with pytest.raises(ValueError, match="does not fit"):
        c.place(PodShape(4, MILLI, 1000, 1024), Choice(two, (0, 1, 2, 3)))
    c.place(PodShape(1, 810, 1000, 1024), Choice(two, (0,)))
    with pytest.raises(ValueError, match="lack 300 milli"):
        c.place(PodShape(1, 300, 1000, 1024), Choice(two, (0,)))
    assert c.nodes[two].free == [190, MILLI]


def test_sharing_beats_a_whole_gpu_per_fractional_pod() -> None:
    whole = "best-fit, whole GPU per fraction"
    results = run([0], SCALE, topos_mode="whole", baselines=("best-fit", "fgd", whole))
    at = {name: runs[0].at_capacity for name, runs in results.runs.items()}
    for sharing in ("best-fit", "fgd"):
        assert at[sharing] < at[whole]
        assert at[sharing] < at[TOPOS_WHOLE]
    assert results.runs[TOPOS_WHOLE][0].violations == ()


def test_a_fractional_pod_asks_by_annotation_only() -> None:
    shape = PodShape(1, 470, 8000, 30517)
    shared = pod_object("p", shape, fraction=True)
    assert cast(dict[str, Any], shared["metadata"])["annotations"] == {FRACTION_KEY: "0.47"}
    assert "nvidia.com/gpu" not in json.dumps(shared)
    whole = parse_pod(pod_object("p", shape, fraction=False))
    assert isinstance(whole, PodRequest)
    assert (whole.gpus, whole.requests["cpu"], whole.requests["memory"]) == (1, 8000, 30517 * 2**20)


def test_the_fraction_arm_has_figures_only_when_pods_share_gpus() -> None:
    results = run([0], SCALE, topos_mode="fraction", baselines=())
    why = fraction_support()
    if why is not None:  # this build does not share: said so, and no figures
        assert results.unsupported == {TOPOS_FRACTION: why}
        assert TOPOS_FRACTION not in results.runs
        return
    got = topos_replay(workload(SCALE, seed=0), fraction=True)
    assert got.violations == []
    assert got.shared_gpus > 0
    assert len(results.runs[TOPOS_FRACTION]) == 1


def test_the_topos_ledger_names_a_gpu_given_beyond_its_milli() -> None:
    node = NodeShape("T4", 2, 104000, 524288)
    ledger = Ledger({"t4": node})
    ledger.hold("t4", PodShape(1, 600, 1000, 1024), (0,), whole=False)
    ledger.hold("t4", PodShape(1, 400, 1000, 1024), (0,), whole=False)
    assert ledger.violations == []
    assert ledger.holders == {("t4", 0): 2}
    ledger.hold("t4", PodShape(1, 50, 1000, 1024), (0,), whole=False)
    ledger.hold("t4", PodShape(1, 250, 1000, 1024), (1,), whole=True)  # a whole GPU
    ledger.hold("t4", PodShape(1, MILLI, 1000, 1024), (1,), whole=True)
    assert ledger.violations == ["t4 GPU 0: 1050 milli held", "t4 GPU 1: 2000 milli held"]
