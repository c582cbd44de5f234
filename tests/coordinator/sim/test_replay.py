"""Replaying small hand-made traces: what each policy does is what a user would read in the
report — queueing, all-or-nothing gangs, priorities, link classes, leaf locality, MIG, and the
communication-cost stretch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from coordinator.sim import Job, JobOutcome, RunResult, Simulator, Summary, make_policy
from coordinator.sim.replay import ReplaySettings
from tests.support.sim_cluster import make_cluster

PCIE = "nodes: [{profile: pcie-8x, count: 1}]"
TWO_LEAVES = """
layout: {nodesPerLeaf: 2, leavesPerSpine: 2}
nodes: [{profile: dgx-h100, count: 4}]
"""


def job(job_id: str, arrival: float, duration: float, **kw: Any) -> Job:
    return Job(job_id=job_id, arrival_s=arrival, duration_s=duration, **kw)


@dataclass
class Run:
    result: RunResult
    summary: Summary
    by_id: dict[str, JobOutcome]

    def unplaced(self) -> dict[str, str]:
        return {self.result.jobs[i].job_id: why for i, why in self.result.unplaced.items()}


def replay(cluster: str, jobs: list[Job], policy: str) -> Run:
    spec, nodes = make_cluster(cluster)
    result = Simulator(nodes, jobs, cost_model=spec.cost_model).run(make_policy(policy))
    return Run(result, result.summary(), {o.job.job_id: o for o in result.outcomes.values()})


@pytest.mark.parametrize("policy", ["topos", "spread", "firstfit"])
def test_a_full_node_makes_the_next_job_wait(policy: str) -> None:
    jobs = [job("a", 0, 100, gpus=8), job("b", 10, 50, gpus=8)]
    run = replay("nodes: [{profile: dgx-h100, count: 1}]", jobs, policy)
    a, b = run.by_id["a"], run.by_id["b"]
    assert (a.start_s, a.end_s) == (0, 100)  # NVSwitch: no stretch
    assert b.start_s == 100
    assert b.wait_s == 90
    assert b.jct_s == 140
    summary = run.summary
    assert summary.placed == 2
    assert summary.unplaced == 0


@pytest.mark.parametrize("policy", ["topos", "spread", "firstfit"])
def test_gang_too_big_for_the_cluster_waits_whole_and_blocks_nobody(policy: str) -> None:
    jobs = [job("huge", 0, 100, gpus=8, gang_size=5), job("small", 1, 10, gpus=2)]
    run = replay(TWO_LEAVES, jobs, policy)
    assert list(run.unplaced()) == ["huge"]
    assert run.by_id["small"].start_s == 1
    assert run.unplaced()["huge"].startswith(
        "waiting for pod group huge: 0/5 members placed; 0/4 nodes are available: 4 "
    )


def test_higher_priority_starts_first_when_capacity_frees() -> None:
    jobs = [
        job("running", 0, 100, gpus=8, priority=1000),  # nobody may preempt it
        job("low", 1, 10, gpus=8, priority=0),
        job("high", 2, 10, gpus=8, priority=1000),
    ]
    run = replay("nodes: [{profile: dgx-h100, count: 1}]", jobs, "topos")
    by_id = run.by_id
    assert by_id["high"].start_s == 100
    assert by_id["low"].start_s == 110


def test_a_higher_priority_job_preempts_and_the_victim_starts_over() -> None:
    jobs = [job("victim", 0, 100, gpus=8), job("urgent", 50, 10, gpus=8, priority=1000)]
    run = replay("nodes: [{profile: dgx-h100, count: 1}]", jobs, "topos")
    urgent, victim = run.by_id["urgent"], run.by_id["victim"]
    assert 50 <= urgent.start_s < 60  # the engine's preemption: evict, then bind (backoff)
    assert victim.start_s >= urgent.end_s  # its first 50 s were lost: it ran again, whole
    assert victim.end_s == victim.start_s + 100
    assert run.result.restarts == 1
    assert run.summary.restarts == 1
    # the work lost: 8 GPUs from 0 until evicted (at 50 s or after, before urgent starts)
    assert 8 * 50 <= run.result.lost_gpu_s <= 8 * urgent.start_s
    assert run.result.lost_pods == 1


def test_topos_keeps_a_pair_on_one_pcie_switch_where_first_fit_does_not() -> None:
    # GPU 0 taken first; the first free pair is GPUs 1,2 (NODE), a PIX pair is still free.
    jobs = [job("one", 0, 1000, gpus=1), job("pair", 1, 100, gpus=2)]
    topos = replay(PCIE, jobs, "topos")
    naive = replay(PCIE, jobs, "firstfit")
    assert topos.by_id["pair"].worst_link == "PIX"
    assert topos.summary.best_link_share == 1.0
    assert naive.by_id["pair"].worst_link == "NODE"
    assert naive.summary.best_link_share == 0.0
    # the cost model stretches the NODE pair: 1.25 × 100 s
    assert naive.by_id["pair"].jct_s == pytest.approx(125 - 1 + 1)
    assert topos.by_id["pair"].stretch == pytest.approx(1.10)


def test_eight_gpus_across_sockets_are_stretched_by_the_sys_factor() -> None:
    run = replay(PCIE, [job("all", 0, 100, gpus=8)], "topos")
    outcome = run.by_id["all"]
    assert outcome.worst_link == "SYS"
    assert outcome.end_s == pytest.approx(140)
    # …yet SYS is the best the hardware has for 8 GPUs: it counts as on the best link class
    assert run.summary.best_link_share == 1.0


def test_gang_stays_in_one_leaf_with_topos_but_not_with_the_baselines() -> None:
    # One node of leaf-1 is busy; a 2-node gang fits whole in leaf-2.
    jobs = [job("busy", 0, 1000, gpus=8), job("gang", 1, 100, gpus=8, gang_size=2)]
    spans = {
        p: replay(TWO_LEAVES, jobs, p).by_id["gang"].span for p in ("topos", "spread", "firstfit")
    }
    assert spans == {"topos": "leaf", "spread": "spine", "firstfit": "spine"}
    topos = replay(TWO_LEAVES, jobs, "topos")
    assert topos.summary.gangs_one_leaf_share == 1.0
    assert topos.by_id["gang"].stretch == pytest.approx(1.10)
    naive = replay(TWO_LEAVES, jobs, "firstfit")
    assert naive.by_id["gang"].stretch == pytest.approx(1.25)


@pytest.mark.parametrize("policy", ["topos", "spread", "firstfit"])
def test_mig_jobs_land_on_mig_instances(policy: str) -> None:
    cluster = """
nodes:
  - {profile: dgx-h100, count: 1}
  - {profile: a100-mig, count: 2, namePrefix: mig}
"""
    jobs = [job(f"infer-{i}", i, 100, mig_profile="1g.5gb") for i in range(3)]
    run = replay(cluster, jobs, policy)
    by_id = run.by_id
    placed = {k: v.nodes for k, v in by_id.items()}
    # two A100s with one 1g.5gb each: two run at once on the MIG nodes, the third waits
    assert placed["infer-0"][0].startswith("mig-")
    assert placed["infer-1"][0].startswith("mig-")
    assert by_id["infer-2"].start_s == 100
    assert run.summary.utilisation == 0.0  # no whole GPU used


def test_gpu_type_constrains_placement_and_unknown_types_are_unplaced() -> None:
    cluster = "nodes: [{profile: dgx-h100, count: 1}, {profile: pcie-8x, count: 1}]"
    jobs = [job("l40s", 0, 10, gpus=1, gpu_type="L40S"), job("b200", 0, 10, gpu_type="B200")]
    run = replay(cluster, jobs, "spread")
    assert run.by_id["l40s"].nodes == ("pcie-8x-001",)
    assert "didn't match Pod's node affinity/selector" in run.unplaced()["b200"]


def test_numa_pinned_pod_gets_one_numa_node_with_topos() -> None:
    jobs = [job("hpc", 0, 10, gpus=2, numa_policy="single-numa", cpu=8, memory_gib=32)]
    outcome = replay(PCIE, jobs, "topos").by_id["hpc"]
    assert outcome.worst_link == "PIX"  # both GPUs on one socket, on one switch


def test_utilisation_and_fragmentation_are_time_weighted() -> None:
    # One 8-GPU node: 4 GPUs busy for the whole arrival window [0, 100].
    jobs = [job("half", 0, 1000, gpus=4), job("late", 100, 1, gpus=1)]
    summary = replay("nodes: [{profile: dgx-h100, count: 1}]", jobs, "firstfit").summary
    assert summary.utilisation == pytest.approx(0.5)
    assert summary.fragmentation_gpus == pytest.approx(4.0)
    assert summary.fragmentation_share == pytest.approx(1.0)
    assert summary.makespan_s == 1000


def test_policies_see_identical_input_and_unknown_policy_is_refused() -> None:
    with pytest.raises(KeyError, match="unknown policy 'best'"):
        make_policy("best")


def test_every_waiting_job_says_why_even_when_a_twin_was_tried_first() -> None:
    jobs = [job("big-1", 0, 10, gpus=8, gang_size=9), job("big-2", 0, 10, gpus=8, gang_size=9)]
    run = replay(TWO_LEAVES, jobs, "spread")
    reasons = run.unplaced()
    assert set(reasons) == {"big-1", "big-2"}
    for name, why in reasons.items():  # the engine's own words, as kubectl describe shows them
        assert why.startswith(f"waiting for pod group {name}: 0/9 members placed; 0/4 nodes are")


def test_fill_mode_drops_a_job_whose_first_attempt_fails_and_nothing_leaves() -> None:
    _spec, nodes = make_cluster(PCIE)  # one node, 8 GPUs
    jobs = [
        job("a", 0, 10, gpus=4),
        job("b", 1, 10, gpus=8),  # does not fit now: dropped, though room frees at 10 s normally
        job("c", 2, 10, gpus=4),
        job("d", 3, 10, gpu_fraction=0.5),  # every GPU held whole: no room for a share
        job("e", 4, 10, gpus=0),
    ]
    fill = Simulator(nodes, jobs, settings=ReplaySettings(fill=True)).run(make_policy("topos"))
    placed = {o.job.job_id: o for o in fill.outcomes.values()}
    assert sorted(placed) == ["a", "c", "e"]
    assert all(o.start_s == o.job.arrival_s for o in placed.values())  # placed on arrival
    unplaced = {fill.jobs[i].job_id: why for i, why in fill.unplaced.items()}
    assert sorted(unplaced) == ["b", "d"]
    assert "nvidia.com/gpu" in unplaced["b"]
    assert fill.attempts == len(jobs)  # each tried once, never again
    assert fill.usage[-1].busy_gpus == 8  # nothing finished
    held = {o.job.job_id: [p for _, p in o.placements] for o in placed.values()}
    assert sorted(g for p in held["a"] + held["c"] for g in p.gpus) == list(range(8))
    usual = Simulator(nodes, jobs).run(make_policy("topos"))
    assert len(usual.outcomes) == len(jobs)  # without fill, b and d wait for room and run
