"""Hardware faults injected while a replay runs (``ReplaySettings.faults``): a GPU that fails
fails the job on it, which starts over elsewhere with its work lost; an NVLink that degrades
under a running job slows the rest of its run; a job arriving after the link degraded avoids
the pair when the scheduler sees the agent's verdicts, and pays for it when it does not."""

from __future__ import annotations

import pytest

from coordinator.sim import Job, RunResult, Simulator, make_policy
from coordinator.sim.faults import Fault, random_faults, with_fault
from coordinator.sim.replay import ReplaySettings
from tests.support.sim_cluster import make_cluster

TWO_H100 = "nodes: [{profile: dgx-h100, count: 2}]"
ONE_H100 = "nodes: [{profile: dgx-h100, count: 1}]"
ONE_DGX1 = "nodes: [{profile: dgx1-v100, count: 1}]"


def job(job_id: str, arrival: float, duration: float, **kw: int) -> Job:
    return Job(job_id=job_id, arrival_s=arrival, duration_s=duration, **kw)


def run(cluster: str, jobs: list[Job], *faults: Fault, blind: bool = False) -> RunResult:
    spec, nodes = make_cluster(cluster)
    settings = ReplaySettings(faults=faults, health_blind=blind)
    sim = Simulator(nodes, jobs, cost_model=spec.cost_model, settings=settings)
    return sim.run(make_policy("topos"))


def node_names(cluster: str) -> list[str]:
    return [n.name for n in make_cluster(cluster)[1]]


def test_a_gpu_failing_under_a_job_restarts_it_elsewhere_and_its_work_is_lost() -> None:
    jobs = [job("a", 0, 1000, gpus=8)]
    (first,) = run(TWO_H100, jobs).outcomes.values()
    (node,) = first.nodes
    result = run(TWO_H100, jobs, Fault(400, node, 3, "gpu"))
    (again,) = result.outcomes.values()
    assert again.nodes != (node,)  # 7 healthy GPUs left there: too few
    assert 400 <= again.start_s < 410  # restarted at once, on the other node
    assert again.end_s == pytest.approx(again.start_s + 1000)
    assert (result.failed_jobs, result.restarts, result.lost_pods) == (1, 1, 1)
    assert result.lost_gpu_s == pytest.approx(8 * 400)


def test_a_job_whose_gpu_failed_with_nowhere_else_to_go_waits_and_says_why() -> None:
    (node,) = node_names(ONE_H100)
    result = run(ONE_H100, [job("a", 0, 1000, gpus=8)], Fault(400, node, 3, "gpu"))
    assert not result.outcomes
    assert result.failed_jobs == 1
    assert result.unplaced[0] == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    assert result.lost_gpu_s == pytest.approx(8 * 400)


def test_a_link_degrading_under_a_running_job_slows_the_rest_of_its_run() -> None:
    (node,) = node_names(ONE_H100)
    result = run(ONE_H100, [job("a", 0, 1000, gpus=8)], Fault(400, node, 0, "link"))
    (a,) = result.outcomes.values()
    # NVSwitch: GPU 0's port degrades every pair of GPU 0; across the sockets that is SYS (1.4)
    assert a.end_s == pytest.approx(400 + 600 * 1.4)
    assert a.degraded_link
    assert a.stretch == pytest.approx((400 + 600 * 1.4) / 1000)
    assert (result.slowed_jobs, result.failed_jobs, result.lost_gpu_s) == (1, 0, 0.0)


def test_after_a_link_degrades_a_new_pair_avoids_it_unless_the_scheduler_is_blind() -> None:
    (node,) = node_names(ONE_DGX1)
    jobs = [job("pair", 10, 1000, gpus=2)]
    (clean,) = run(ONE_DGX1, jobs).outcomes.values()
    ((_, placement),) = clean.placements
    fault = Fault(0, node, placement.gpus[0], "link")
    # the fault degrades the pair a clean run chose (GPU 0's widest NVLink peer): blind, the
    # same choice is made again and pays for it
    (blind,) = run(ONE_DGX1, jobs, fault, blind=True).outcomes.values()
    (aware,) = run(ONE_DGX1, jobs, fault).outcomes.values()
    assert blind.degraded_link
    assert blind.stretch > 1.0
    assert not aware.degraded_link
    assert aware.stretch == pytest.approx(1.0)
    assert aware.end_s < blind.end_s


def test_random_faults_are_seeded_sorted_and_a_bad_gpu_index_is_refused() -> None:
    _, nodes = make_cluster("nodes: [{profile: dgx-h100, count: 40}]")
    one = random_faults(nodes, seed=3, horizon_s=1000)
    assert one == random_faults(nodes, seed=3, horizon_s=1000)
    assert one
    assert [f.at_s for f in one] == sorted(f.at_s for f in one)
    links = {(f.node, f.gpu) for f in one if f.kind == "link"}
    assert any((f.node, f.gpu) in links for f in one if f.kind == "gpu")  # a warned failure
    with pytest.raises(ValueError, match="fault on n: GPU 9 does not exist"):
        with_fault(nodes[0].topology, Fault(0, "n", 9, "gpu"))  # type: ignore[arg-type]
