"""``benchmarks.sharing_trace`` at a tiny scale, one seed: the workload has the trace's shape, the
metric reads what was allocated, and what must hold whatever the seed holds — GPU milli
conserved, no node or GPU over-committed, sharing beating a whole GPU per fractional pod.
Nothing here asserts a time or a ranking between baselines that chance could reverse."""

from __future__ import annotations

import json
import subprocess
from typing import Any, cast

import pytest

from benchmarks.sharing.against import (
    ROOT,
    THIS_TREE,
    AgainstError,
    against_label,
    replay_at,
    worktree,
)
from benchmarks.sharing.cluster import Choice, Cluster
from benchmarks.sharing.fgd import Fgd
from benchmarks.sharing.policies import BASELINES, best_fit
from benchmarks.sharing.replay import CURVE_POINTS, Run, curve, replay_baseline
from benchmarks.sharing.report import TOPOS_FRACTION, TOPOS_WHOLE, Summary, goal
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
from benchmarks.sharing_trace import main, run
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


def _git_checkout() -> bool:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "HEAD"], capture_output=True, check=False
    )
    return done.returncode == 0


@pytest.mark.skipif(not _git_checkout(), reason="needs a git checkout with commits")
def test_against_a_commit_runs_its_arm_on_the_same_arrivals() -> None:
    work = workload(SCALE, seed=0)
    here = topos_replay(work, fraction=False)
    with worktree("HEAD") as tree:
        assert tree.path.is_dir()
        assert not tree.path.is_relative_to(ROOT)
        there = replay_at(tree, work, scale=SCALE, ratio=1.3)
    assert not tree.path.exists()  # the worktree is removed after
    assert there.policy == against_label("HEAD") == "topos at HEAD, whole GPU per fraction"
    assert (there.placed, there.violations) == (here.placed, ())
    assert there.curve == curve([p.demand for p in work.pods], here.allocated, work.capacity)


def test_against_an_unknown_commit_is_refused_before_any_replay(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(AgainstError, match="no-such-rev"), worktree("no-such-rev"):
        pass
    argv = ["--against", "no-such-rev", "--seeds", "1", "--scale", str(SCALE), "--plot", ""]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--against no-such-rev" in err
    assert "seed 0" not in err


def _summary(policy: str, us: float, unallocated: float) -> Summary:
    points = tuple([unallocated] * CURVE_POINTS)
    return Summary(policy, (Run(policy, 0, 1000, 900, us * 1000 / 1e6, points),))


def test_the_speed_goal_is_judged_against_the_arms_it_names() -> None:
    summaries = [
        _summary(TOPOS_FRACTION, 700, 0.04),
        _summary(TOPOS_WHOLE, 500, 0.18),
        _summary("best-fit", 200, 0.072),
        _summary("fgd", 400, 0.056),
        _summary(against_label(THIS_TREE, fraction=True), 650, 0.04),
        _summary(against_label("2272839"), 800, 0.18),
    ]
    strict = goal(summaries, {})
    assert "not met" in strict
    assert "(1.40×)" in strict
    today = (against_label(THIS_TREE, fraction=True), against_label("2272839"))
    judged = goal(summaries, {}, speed=today)
    assert "— met" in judged
    assert "650 µs/decision against topos at 2272839" in judged
    assert "(0.81×)" in judged
    worse = [*summaries[:2], _summary("best-fit", 200, 0.05), *summaries[3:]]
    assert "not met" in goal(worse, {}, speed=today)  # 4.0 % > 0.6 × 5.0 %
