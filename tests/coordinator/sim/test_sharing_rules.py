"""The FGD paper's baselines as engine profiles (``coordinator/sim/baselines/sharing.py``): each
chooses the GPU of a share by its own rule, never puts a whole-GPU pod on a shared GPU, and an
unknown rule is refused by name."""

from __future__ import annotations

import pytest

from coordinator.sim import Job, Simulator
from coordinator.sim.baselines.perpod import members_one_by_one
from coordinator.sim.baselines.sharing import Fgd, Shape, sharing_framework
from coordinator.sim.policies import Policy
from coordinator.sim.replay import ReplaySettings
from tests.support.sim_cluster import make_cluster

ONE_NODE = "nodes: [{profile: pcie-8x, count: 1}]"


def gpus_of(rule: str, jobs: list[Job], fgd: Fgd | None = None) -> dict[str, tuple[int, ...]]:
    _spec, nodes = make_cluster(ONE_NODE)
    policy = Policy(rule, sharing_framework(rule, seed=1, fgd=fgd), members_one_by_one)
    result = Simulator(nodes, jobs, settings=ReplaySettings(fill=True)).run(policy)
    return {o.job.job_id: o.placements[0][1].gpus for o in result.outcomes.values()}


def share(job_id: str, at: float, fraction: float) -> Job:
    return Job(job_id=job_id, arrival_s=at, duration_s=1, gpu_fraction=fraction, cpu=1)


SHARES = [share("a", 0, 0.5), share("b", 1, 0.8), share("c", 2, 0.2)]


def test_first_fit_takes_the_lowest_gpu_with_room_best_fit_the_tightest() -> None:
    assert gpus_of("first-fit", SHARES) == {"a": (0,), "b": (1,), "c": (0,)}
    assert gpus_of("best-fit", SHARES) == {"a": (0,), "b": (1,), "c": (1,)}
    assert gpus_of("packing", SHARES)["c"] == (1,)  # onto the shared GPU with least room


def test_fgd_keeps_whole_gpus_whole_for_a_workload_of_whole_gpu_pods() -> None:
    fgd = Fgd([(Shape(1, 1000, 1000), 1.0)])
    got = gpus_of("fgd", [share("a", 0, 0.5), share("b", 1, 0.5)], fgd)
    assert got["a"] == got["b"]  # the second half shares the first's GPU: no whole GPU broken


@pytest.mark.parametrize("rule", ["random", "first-fit", "best-fit", "packing"])
def test_a_whole_gpu_pod_never_takes_a_shared_gpu(rule: str) -> None:
    jobs = [share(f"s{i}", i, 0.3) for i in range(4)]
    jobs.append(Job(job_id="w", arrival_s=9, duration_s=1, gpus=4, cpu=1))
    got = gpus_of(rule, jobs)
    shared = {g for k, v in got.items() if k != "w" for g in v}
    assert len(got["w"]) == 4
    assert not shared & set(got["w"])


def test_an_unknown_rule_or_fgd_without_its_workload_is_refused() -> None:
    with pytest.raises(KeyError, match="unknown sharing rule 'worst-fit'"):
        sharing_framework("worst-fit")
    with pytest.raises(ValueError, match="fgd needs its target workload"):
        sharing_framework("fgd")


def test_first_fit_looks_at_every_node_of_a_large_cluster() -> None:
    # kube's adaptive percentageOfNodesToScore would sample from a rotating start past 100 nodes
    _spec, nodes = make_cluster("nodes: [{profile: pcie-8x, count: 150}]")
    jobs = [Job(job_id=f"j{i}", arrival_s=i, duration_s=1, cpu=1) for i in range(8)]
    policy = Policy("first-fit", sharing_framework("first-fit"), members_one_by_one)
    result = Simulator(nodes, jobs, settings=ReplaySettings(fill=True)).run(policy)
    first = min(n.name for n in nodes)
    assert {o.nodes for o in result.outcomes.values()} == {(first,)}
