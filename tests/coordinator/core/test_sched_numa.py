"""NUMA policies (best-effort, restricted, single-numa, isolated) over per-NUMA free CPU, memory
and GPUs, including the KubeNexus guide's examples written with its annotation names, and the
"no single NUMA node has sufficient capacity" message."""

from __future__ import annotations

import pytest

from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.podinfo import NumaUse
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod, yaml_pod
from tests.support.outcomes import decided
from tests.support.sched_hw import dgx1, dgx_h100, gpu_node, pcie8, place_all, run, running

GiB = 2**30

ML_TRAINING = """
metadata:
  name: ml-training
  annotations:
    numa.scheduling.kubenexus.io/policy: "single-numa"
    numa.scheduling.kubenexus.io/resources: "cpu,memory,nvidia.com/gpu"
spec:
  containers:
  - name: training
    image: nvcr.io/nvidia/pytorch:latest
    resources:
      requests: {cpu: "16", memory: "64Gi", nvidia.com/gpu: "2"}
      limits: {nvidia.com/gpu: "2"}
"""

HPC_ISOLATED = """
metadata:
  name: hpc-simulation-{i}
  annotations:
    numa.scheduling.kubenexus.io/policy: "isolated"
    numa.scheduling.kubenexus.io/resources: "cpu,memory"
spec:
  containers:
  - name: simulation
    image: hpc-app:latest
    resources:
      requests: {{cpu: "32", memory: "128Gi"}}
      limits: {{cpu: "32", memory: "128Gi"}}
"""

# Scenario "multi-GPU ML training": four workers, two GPUs each (requests only), NUMA-aligned.
WORKER = """
metadata:
  name: worker-{i}
  labels:
    pod-group.scheduling.kubenexus.io/name: gpu-training
    pod-group.scheduling.kubenexus.io/min-available: "4"
  annotations:
    numa.scheduling.kubenexus.io/policy: single-numa
    numa.scheduling.kubenexus.io/resources: cpu,memory,nvidia.com/gpu
spec:
  containers:
  - name: worker
    image: nvcr.io/nvidia/pytorch:latest
    resources:
      requests: {{cpu: "16", memory: "64Gi", nvidia.com/gpu: "2"}}
"""


def test_ml_training_single_numa_gets_gpus_cpu_and_memory_from_one_numa_node() -> None:
    topo = dgx_h100("h")
    result = decided(run(yaml_pod(ML_TRAINING), [gpu_node("h", topo)]))
    (numa,) = result.placement.numa
    assert len(result.placement.gpus) == 2
    assert {topo.gpus[g].numa_node for g in result.placement.gpus} == {numa}
    assert result.placement.numa_usage == (NumaUse(numa, 16000, 64 * GiB),)
    assert result.annotations()["topos.io/assigned-numa"] == str(numa)
    assert result.annotations()["topos.io/assigned-gpus"] == ",".join(
        topo.gpus[g].uuid for g in result.placement.gpus
    )


def test_single_numa_moves_to_the_numa_node_with_room() -> None:
    topo = dgx_h100("h")
    # NUMA 0 has 56 CPUs; a pinned pod holds 50 of them.
    hog = running(pod("hog", cpu="50"), numa=(0,), numa_usage=(NumaUse(0, 50000, 0),))
    result = decided(run(yaml_pod(ML_TRAINING), [gpu_node("h", topo, pods=[hog])]))
    assert result.placement.numa == (1,)
    assert set(result.placement.gpus) <= {4, 5, 6, 7}


def test_single_numa_failure_message_and_restricted_fallback() -> None:
    # Two nodes whose NUMA nodes each keep only 10 CPUs free: 16 fit per node, not per NUMA node.
    def squeezed(name: str):
        hogs = [
            running(pod(f"hog{k}", cpu="46"), numa=(k,), numa_usage=(NumaUse(k, 46000, 0),))
            for k in (0, 1)
        ]
        return gpu_node(name, dgx_h100(name), pods=hogs)

    nodes = [squeezed("h1"), squeezed("h2")]
    failure = run(yaml_pod(ML_TRAINING), nodes)
    assert isinstance(failure, Failure)
    assert failure.message == (
        "0/2 nodes are available: 2 no single NUMA node has sufficient capacity."
    )
    restricted = yaml_pod(ML_TRAINING.replace('"single-numa"', '"restricted"'))
    spread = decided(run(restricted, nodes))
    assert spread.placement.numa == (0, 1)
    assert sum(u.cpu_milli for u in spread.placement.numa_usage) == 16000


def test_hpc_isolated_takes_a_whole_numa_node_and_keeps_it() -> None:
    # 2 NUMA nodes × 56 CPUs: after two isolated pods 48 CPUs are free, but on no free NUMA node.
    snapshot = Snapshot([gpu_node("h", dgx_h100("h"))])
    first, second, third = place_all(
        [yaml_pod(HPC_ISOLATED.format(i=i)) for i in range(3)], snapshot
    )
    assert {decided(first).placement.numa, decided(second).placement.numa} == {(0,), (1,)}
    assert decided(first).placement.exclusive_numa
    assert isinstance(third, Failure)
    assert third.message == "0/1 nodes are available: 1 no NUMA node is free of other pods."


def test_isolated_needs_a_numa_node_nobody_uses() -> None:
    topo = pcie8("p")
    # A GPU pod on NUMA 0 (GPU 1) makes NUMA 0 busy; the isolated pod goes to NUMA 1.
    gpu_user = running(pod("g", gpus=1), gpus=(1,))
    result = decided(
        run(yaml_pod(HPC_ISOLATED.format(i=0)), [gpu_node("p", topo, pods=[gpu_user])])
    )
    assert result.placement.numa == (1,)
    # Nothing pinned may join an isolated NUMA node afterwards, even when CPUs are left there.
    snapshot = Snapshot([gpu_node("p", topo, cpu=128, memory_gib=1024)])
    small = yaml_pod(HPC_ISOLATED.format(i=0).replace('"32"', '"8"'))
    place_all([small], snapshot)
    taken = next(p.numa for p in snapshot.get("p").pods)
    single = pod("s", cpu="2", annotations={"topos.io/numa-policy": "single-numa"})
    after = decided(schedule_one(single, snapshot, build_framework()))
    assert after.placement.numa != taken


def test_multi_gpu_training_scenario_four_workers_numa_aligned() -> None:
    topo = dgx_h100("h")
    snapshot = Snapshot([gpu_node("h", topo)])
    results = place_all([yaml_pod(WORKER.format(i=i)) for i in range(4)], snapshot)
    used: set[int] = set()
    per_numa = {0: 0, 1: 0}
    for r in results:
        d = decided(r)
        (numa,) = d.placement.numa
        assert {topo.gpus[g].numa_node for g in d.placement.gpus} == {numa}
        assert used.isdisjoint(d.placement.gpus)
        used |= set(d.placement.gpus)
        per_numa[numa] += 1
    assert per_numa == {0: 2, 1: 2}


def test_best_effort_prefers_an_aligned_node_and_never_fails_for_alignment() -> None:
    def gpu_hog(gpus: tuple[int, ...]):
        return running(pod("hog", gpus=len(gpus)), gpus=gpus)

    # "split": only GPUs 3 and 4 are free (different NUMA nodes); "aligned": 6, 7 free on NUMA 1.
    split = gpu_node("split", dgx1("split"), pods=[gpu_hog((0, 1, 2, 5, 6, 7))])
    aligned = gpu_node("aligned", dgx1("aligned"), pods=[gpu_hog((0, 1, 2, 3, 4, 5))])
    obj = pod("p", cpu="4", gpus=2, annotations={"topos.io/numa-policy": "best-effort"})
    result = decided(run(obj, [split, aligned]))
    assert result.node == "aligned"
    assert result.verdicts["split"].scores["NumaTopology"] < result.breakdown["NumaTopology"]
    alone = decided(run(obj, [split]))
    assert set(alone.placement.gpus) == {3, 4}


def test_restricted_uses_the_fewest_numa_nodes() -> None:
    node = gpu_node("p", pcie8("p"))
    small = pod("s", cpu="20", annotations={"topos.io/numa-policy": "restricted"})
    assert len(decided(run(small, [node])).placement.numa) == 1
    big = pod("b", cpu="40", annotations={"topos.io/numa-policy": "restricted"})
    assert decided(run(big, [node])).placement.numa == (0, 1)


def test_numa_resources_without_gpu_leave_gpus_unconstrained() -> None:
    topo = dgx_h100("h")
    # NUMA 0 is out of CPUs; GPUs on NUMA 0 are still fine when only cpu/memory are aligned.
    hog = running(pod("hog", cpu="56"), numa=(0,), numa_usage=(NumaUse(0, 56000, 0),))
    holder = running(pod("g", gpus=4), gpus=(4, 5, 6, 7))
    obj = pod(
        "p",
        cpu="8",
        gpus=2,
        annotations={
            "topos.io/numa-policy": "single-numa",
            "topos.io/numa-resources": "cpu,memory",
        },
    )
    result = decided(run(obj, [gpu_node("h", topo, pods=[hog, holder])]))
    assert result.placement.numa == (1,)
    assert set(result.placement.gpus) <= {0, 1, 2, 3}
    aligned = pod("q", cpu="8", gpus=2, annotations={"topos.io/numa-policy": "single-numa"})
    failure = run(aligned, [gpu_node("h", topo, pods=[hog, holder])])
    assert isinstance(failure, Failure)
    assert failure.statuses["h"].reasons == ("no single NUMA node has sufficient capacity",)


@pytest.mark.parametrize("seed", range(8))
def test_numa_policy_invariants_on_random_occupancy(seed: int) -> None:
    """Whatever the occupancy, a placement honours its policy, and a rejection is justified."""
    import random

    from coordinator.core.plugins.placement import plan_placement
    from coordinator.core.status import Status

    rng = random.Random(seed)
    topo = rng.choice([dgx_h100, pcie8, dgx1])("n")
    pods = []
    for k, numa in enumerate(n.id for n in topo.numa_nodes):
        if rng.random() < 0.7:
            cpu = rng.randint(1, len(topo.numa_nodes[k].cpus)) * 1000
            pods.append(
                running(
                    pod(f"pin{k}", cpu=f"{cpu}m"),
                    numa=(numa,),
                    numa_usage=(NumaUse(numa, cpu, 0),),
                )
            )
    busy_gpus = tuple(sorted(rng.sample(range(8), rng.randint(0, 6))))
    if busy_gpus:
        pods.append(running(pod("g", gpus=len(busy_gpus)), gpus=busy_gpus))
    node = gpu_node("n", topo, pods=pods)
    free_cpu = {n.numa: n.cpu_milli for n in node.numa_free}
    for policy in ("single-numa", "isolated", "restricted", "best-effort"):
        cpu = rng.choice([2, 8, 24, 48])
        gpus = rng.choice([0, 1, 2])
        obj = pod("p", cpu=str(cpu), gpus=gpus, annotations={"topos.io/numa-policy": policy})
        from tests.support.sched_hw import request

        plan = plan_placement(node, request(obj))
        if isinstance(plan, Status):
            assert policy != "best-effort" or gpus > len(node.free_gpus), plan
            if policy == "single-numa":
                # no single NUMA node had both the CPUs and the GPUs
                for n in node.numa_free:
                    assert not (n.cpu_milli >= cpu * 1000 and len(n.gpus) >= gpus)
            continue
        placement = plan.placement
        assert len(placement.gpus) == gpus
        assert set(placement.gpus) <= set(node.free_gpus)
        if policy in ("single-numa", "isolated"):
            (numa,) = placement.numa
            assert free_cpu[numa] >= cpu * 1000
            assert {topo.gpus[g].numa_node for g in placement.gpus} <= {numa}
            if policy == "isolated":
                assert not next(n for n in node.numa_free if n.numa == numa).busy
        if policy == "restricted":
            assert sum(u.cpu_milli for u in placement.numa_usage) == cpu * 1000
            if len(placement.numa) > 1:  # fewest: no single NUMA node would have done
                for n in node.numa_free:
                    assert not (n.cpu_milli >= cpu * 1000 and len(n.gpus) >= gpus)


def test_numa_node_of_unknown_memory_does_not_reject_memory_requests() -> None:
    import msgspec

    from common.model import NumaNode

    topo = dgx_h100("h")
    blind = msgspec.structs.replace(
        topo,
        numa_nodes=tuple(NumaNode(id=n.id, cpus=n.cpus, memory_mib=None) for n in topo.numa_nodes),
    )
    obj = pod("p", cpu="8", memory="300Gi", annotations={"topos.io/numa-policy": "single-numa"})
    result = run(obj, [gpu_node("h", blind, memory_gib=2048)])
    assert isinstance(result, Decision)
    assert len(result.placement.numa) == 1
