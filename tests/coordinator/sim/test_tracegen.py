"""The synthetic trace generator: seeded, fitted to the cluster it is for, and shaped like
published GPU-cluster traces (mostly 1 GPU, powers of two, some gangs, MIG serving, NUMA HPC,
heavy-tailed run times, the offered load asked for)."""

from __future__ import annotations

from collections import Counter

import pytest

from coordinator.sim import Job, TraceShape, cluster_shape, dump_csv, generate, parse_trace
from coordinator.sim.metrics import percentile
from coordinator.sim.tracegen import short_gpu_type
from tests.support.sim_cluster import make_cluster

CLUSTER = """
layout: {nodesPerLeaf: 4}
nodes:
  - {profile: dgx-h100, count: 8}
  - {profile: l40s-4x, count: 4}
  - {profile: a100-mig, count: 4, namePrefix: mig}
"""


@pytest.fixture(scope="module")
def jobs() -> list[Job]:
    _, nodes = make_cluster(CLUSTER)
    return generate(cluster_shape(nodes, jobs=2000, load=0.8, seed=7))


def test_same_seed_same_trace_and_it_round_trips() -> None:
    _, nodes = make_cluster(CLUSTER)
    a = generate(cluster_shape(nodes, jobs=50, seed=3))
    b = generate(cluster_shape(nodes, jobs=50, seed=3))
    c = generate(cluster_shape(nodes, jobs=50, seed=4))
    assert a == b
    assert a != c
    assert parse_trace(dump_csv(a), name="g.csv") == a


def test_shape_of_the_mix(jobs: list[Job]) -> None:
    kinds = Counter(j.kind for j in jobs)
    whole = [j for j in jobs if not j.mig_profile and j.gang_size == 1]
    sizes = Counter(j.gpus for j in whole)
    assert set(sizes) <= {1, 2, 4, 8}
    assert sizes[1] > 0.6 * len(whole)  # most jobs take one GPU
    assert sizes[2] > sizes[4] > 0
    assert 0.03 < kinds["gang"] / len(jobs) < 0.10
    assert 0.06 < kinds["mig"] / len(jobs) < 0.14
    assert any(j.numa_policy for j in jobs)
    assert {j.priority for j in jobs} == {0, 100, 1000}
    # MIG profiles are the cluster's own; MIG serving runs at high priority
    assert {j.mig_profile for j in jobs if j.mig_profile} <= {"1g.5gb", "2g.10gb", "3g.20gb"}
    assert all(j.priority == 1000 for j in jobs if j.mig_profile)
    # gangs fit the cluster: at most half its whole GPUs (8×8 + 4×4 = 80)
    assert max(j.gpus * j.gang_size for j in jobs if j.gang_size > 1) <= 40


def test_gpu_types_exist_in_the_cluster_and_fit_its_nodes(jobs: list[Job]) -> None:
    typed = [j for j in jobs if j.gpu_type]
    assert {j.gpu_type for j in typed} == {"H100", "L40S"}
    assert all(j.gpus <= 4 for j in typed if j.gpu_type == "L40S")  # l40s-4x has 4 GPUs
    assert 0.2 < len(typed) / len(jobs) < 0.4


def test_run_times_are_heavy_tailed(jobs: list[Job]) -> None:
    single = [j.duration_s for j in jobs if j.kind == "single-gpu"]
    assert percentile(single, 99) > 20 * percentile(single, 50)
    assert min(single) >= 30
    assert max(j.duration_s for j in jobs) <= 7 * 86400


def test_offered_load_matches_the_request(jobs: list[Job]) -> None:
    demand = sum(j.duration_s * j.gang_size * j.whole_gpus for j in jobs)
    window = jobs[-1].arrival_s - jobs[0].arrival_s
    load = demand / (80 * window)
    assert 0.6 < load < 1.0  # asked for 0.8 (MIG demand is counted separately)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one job"):
        generate(TraceShape(jobs=0))
    with pytest.raises(ValueError, match="load"):
        generate(TraceShape(load=-1))


@pytest.mark.parametrize(
    ("product", "short"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA RTX A6000", "A6000"),
    ],
)
def test_short_gpu_type(product: str, short: str) -> None:
    assert short_gpu_type(product) == short
