"""``benchmarks.sharing_trace`` at a tiny scale, one seed, on the engine's fill mode: the workload
has the trace's shape and is a trace of the simulator's format, the metric reads what was
allocated, and what must hold whatever the seed — no node or GPU over-committed, every pod placed
on arrival or dropped, sharing beating a whole GPU per fractional pod. Nothing here asserts a
time or a ranking between baselines that chance could reverse."""

from __future__ import annotations

import pytest

from benchmarks.sharing.report import (
    CURVE_POINTS,
    TOPOS_FRACTION,
    TOPOS_WHOLE,
    Run,
    Summary,
    curve,
    goal,
)
from benchmarks.sharing.workload import (
    MILLI,
    cluster,
    jobs,
    pod_shapes,
    workload,
)
from benchmarks.sharing_trace import BASELINES, WHOLE_BASELINE, check, main, replay, run
from coordinator.core.podspec.sharing import HeldShare
from coordinator.core.snapshot.podinfo import Placement
from coordinator.sim.baselines.sharing import Fgd, Shape
from coordinator.sim.metrics import JobOutcome, RunResult
from coordinator.sim.trace import dump_csv, parse_trace

SCALE = 0.05  # 61 nodes, 313 GPUs


def test_the_workload_has_the_published_shape_and_is_a_simulator_trace() -> None:
    nodes = cluster(1.0)
    assert (len(nodes), sum(n.shape.gpus for n in nodes)) == (1213, 6212)
    assert [n.name for n in nodes] == sorted(n.name for n in nodes)  # first-fit's order
    kinds: dict[str, int] = {}
    for shape, count in pod_shapes():
        kinds[shape.kind] = kinds.get(shape.kind, 0) + count
    assert kinds == {"fractional": 3078, "1 GPU": 3911, "2-8 GPUs": 75, "cpu-only": 1088}
    work = workload(SCALE, seed=3)
    assert work == workload(SCALE, seed=3)
    assert work.pods != workload(SCALE, seed=4).pods
    arrived = sum(p.demand for p in work.pods)
    assert 1.25 * work.capacity < arrived <= 1.3 * work.capacity
    trace = jobs(work)
    assert parse_trace(dump_csv(trace), name="t.csv") == trace
    for pod, job in zip(work.pods, trace, strict=True):
        assert job.gpu_milli == pod.demand
        assert (job.gpu_fraction is not None) == pod.fractional
        assert round(job.cpu_per_pod * 1000) == pod.cpu_milli
        assert round(job.memory_gib_per_pod * 1024) == pod.memory_mib
    whole = jobs(work, fraction=False)
    assert all(j.gpu_fraction is None for j in whole)


def test_fragmentation_is_what_each_shape_cannot_use() -> None:
    whole, quarter = Shape(1, MILLI, 1000), Shape(1, 250, 1000)
    cpu_only = Shape(0, 0, 1000)
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


@pytest.mark.parametrize("name", [*BASELINES, TOPOS_WHOLE, TOPOS_FRACTION])
def test_every_policy_overcommits_nothing_and_places_on_arrival(name: str) -> None:
    work = workload(SCALE, seed=0)
    result = replay(name, work)
    assert result.violations == ()
    assert 0 < result.placed < result.arrived == len(work.pods)  # past capacity: some dropped
    assert all(0.0 <= u <= 1.0 for u in result.curve)
    assert list(result.curve) == sorted(result.curve, reverse=True)  # nothing ever leaves
    assert result.curve[0] == 1.0


def test_sharing_beats_a_whole_gpu_per_fractional_pod() -> None:
    results = run([0], SCALE, topos_mode="both", baselines=("best-fit", WHOLE_BASELINE))
    at = {name: runs[0].at_capacity for name, runs in results.runs.items()}
    for sharing in ("best-fit", TOPOS_FRACTION):
        assert at[sharing] < at[WHOLE_BASELINE]
        assert at[sharing] < at[TOPOS_WHOLE]


def test_the_ledger_names_a_gpu_given_beyond_its_thousandths() -> None:
    work = workload(SCALE, seed=0)
    trace = jobs(work)
    fractional = [i for i, p in enumerate(work.pods) if p.fractional]
    shares = sorted(sorted(fractional, key=lambda i: -work.pods[i].gpu_milli)[:2])
    node = work.nodes[0].name
    outcomes = {}
    for i in shares:  # the two largest shares on one GPU, the second a second late
        milli = work.pods[i].gpu_milli
        held = Placement(gpus=(0,), share=HeldShare(milli, 0))
        start = trace[i].arrival_s + (1 if i == shares[-1] else 0)
        outcomes[i] = JobOutcome(
            job=trace[i],
            start_s=start,
            end_s=start,
            nodes=(node,),
            worst_link="",
            multi_gpu_pods=0,
            best_link_pods=0,
            span="node",
            stretch=1.0,
            placements=((node, held),),
        )
    result = RunResult(
        policy="x",
        jobs=tuple(trace),
        outcomes=outcomes,
        unplaced={},
        usage=[],
        whole_gpus=0,
        mig_instances=0,
        attempts=0,
        restarts=0,
        simulated_s=0,
        wall_s=0,
    )
    found = check(work, result, fraction=True)
    assert f"{trace[shares[-1]].job_id} placed at" in found[0]
    total = sum(work.pods[i].gpu_milli for i in shares)
    assert total > MILLI
    assert f"{node} GPU 0: {total} thousandths held" in found
    assert check(work, result, fraction=False)  # a share where a whole GPU was asked


def test_bad_arguments_are_refused_naming_them(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--baselines", "best-fit,worst-fit", "--plot", ""])
    assert stop.value.code == 2
    assert "unknown 'worst-fit'" in capsys.readouterr().err


def _summary(policy: str, us: float, unallocated: float) -> Summary:
    points = tuple([unallocated] * CURVE_POINTS)
    return Summary(policy, (Run(policy, 0, 1000, 900, us * 1000 / 1e6, points),))


def test_the_goal_compares_topos_with_best_fit_fgd_and_its_whole_gpu_arm() -> None:
    summaries = [
        _summary(TOPOS_FRACTION, 700, 0.04),
        _summary(TOPOS_WHOLE, 500, 0.18),
        _summary("best-fit", 200, 0.072),
        _summary("fgd", 400, 0.056),
    ]
    said = goal(summaries)
    assert "not met" in said  # slower than the whole-GPU arm
    assert "(1.40×)" in said
    quick = [_summary(TOPOS_FRACTION, 400, 0.04), *summaries[1:]]
    assert "— met" in goal(quick)
    worse = [*quick[:2], _summary("best-fit", 200, 0.05), *quick[3:]]
    assert "not met" in goal(worse)  # 4.0 % > 0.6 × 5.0 %
