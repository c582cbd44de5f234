"""The placement promises, checked on the built-in hardware profiles as the agent discovers them
(fake NVML + fake sysfs → the agent's reader): DGX-1 quads, PCIe switch pairs, NVLink bridges on
a workstation, NUMA pairs on an NPS4 DGX A100, isolated NUMA on a DGX H100, MIG instances."""

from __future__ import annotations

import itertools

from agent.devices.source import discover_profile
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod, yaml_pod
from tests.support.sched_hw import gpu_node, place_all, run


def discovered(profile: str, host: str):  # type: ignore[no-untyped-def]
    return discover_profile(profile, hostname=host)


def links_of(topo, gpus) -> set[str]:  # type: ignore[no-untyped-def]
    return {str(topo.link(a, b)) for a, b in itertools.combinations(sorted(gpus), 2)}


def test_dgx1_v100_profile_quads() -> None:
    topo = discovered("dgx1-v100", "v100")
    result = run(pod("p", gpus=4), [gpu_node("v100", topo)])
    assert isinstance(result, Decision)
    assert all(link.startswith("NV") for link in links_of(topo, result.placement.gpus))
    snapshot = Snapshot([gpu_node("v100", topo)])
    singles = place_all([pod(f"s{i}", gpus=1) for i in range(4)], snapshot)
    used = {g for r in singles if isinstance(r, Decision) for g in r.placement.gpus}
    (quad,) = place_all([pod("q", gpus=4)], snapshot)
    assert isinstance(quad, Decision)
    assert set(quad.placement.gpus).isdisjoint(used)
    assert all(link.startswith("NV") for link in links_of(topo, quad.placement.gpus))


def test_pcie_8x_profile_pairs_behind_one_switch() -> None:
    topo = discovered("pcie-8x", "pcie")
    snapshot = Snapshot([gpu_node("pcie", topo)])
    results = place_all([pod(f"p{i}", gpus=2) for i in range(4)], snapshot)
    for r in results:
        assert isinstance(r, Decision)
        assert links_of(topo, r.placement.gpus) == {"PIX"}


def test_ws_4x_nvlink_profile_bridge_pairs() -> None:
    topo = discovered("ws-4x-nvlink", "ws")
    snapshot = Snapshot([gpu_node("ws", topo)])
    results = place_all([pod("a", gpus=2), pod("b", gpus=2)], snapshot)
    for r in results:
        assert isinstance(r, Decision)
        assert links_of(topo, r.placement.gpus) == {"NV4"}


def test_dgx_a100_nps4_single_numa_training_pairs() -> None:
    topo = discovered("dgx-a100", "a100")
    training = """
metadata:
  name: ml-{i}
  annotations:
    numa.scheduling.kubenexus.io/policy: single-numa
    numa.scheduling.kubenexus.io/resources: cpu,memory,nvidia.com/gpu
spec:
  containers:
  - name: t
    image: x
    resources:
      requests: {{cpu: "16", memory: "64Gi", nvidia.com/gpu: "2"}}
      limits: {{nvidia.com/gpu: "2"}}
"""
    snapshot = Snapshot([gpu_node("a100", topo)])
    results = place_all([yaml_pod(training.format(i=i)) for i in range(5)], snapshot)
    numas = []
    for r in results[:4]:
        assert isinstance(r, Decision)
        (numa,) = r.placement.numa
        assert {topo.gpus[g].numa_node for g in r.placement.gpus} == {numa}
        numas.append(numa)
    assert sorted(numas) == [1, 3, 5, 7]  # the NUMA nodes that have GPUs
    assert isinstance(results[4], Failure)
    assert results[4].message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_dgx_a100_nps4_single_numa_too_big_for_any_numa_node() -> None:
    topo = discovered("dgx-a100", "a100")
    big = pod(
        "big",
        cpu="48",  # 32 CPUs per NUMA node with NPS4
        gpus=2,
        annotations={"topos.io/numa-policy": "single-numa"},
    )
    failure = run(big, [gpu_node("a100", topo)])
    assert isinstance(failure, Failure)
    assert failure.message == (
        "0/1 nodes are available: 1 no single NUMA node has sufficient capacity."
    )
    restricted = pod("r", cpu="48", gpus=2, annotations={"topos.io/numa-policy": "restricted"})
    result = run(restricted, [gpu_node("a100", topo)])
    assert isinstance(result, Decision)
    assert len(result.placement.numa) == 2


def test_a100_mig_profile_instances() -> None:
    topo = discovered("a100-mig", "mig")
    snapshot = Snapshot([gpu_node("mig", topo)])
    objs = []
    for i in range(2):
        obj = pod(f"m{i}")
        obj["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.5gb": "1"}
        objs.append(obj)
    first, second = place_all(objs, snapshot)
    assert isinstance(first, Decision)
    (instance,) = [i for i in topo.gpus[0].mig_instances if i.profile == "1g.5gb"]
    assert first.placement.mig == ((0, instance.gi_id),)
    assert first.device_ids == (instance.uuid,)
    assert isinstance(second, Failure)
    assert second.statuses["mig"].reasons == ("Insufficient nvidia.com/mig-1g.5gb",)


def test_dgx1_v100_profile_single_numa_node_aligns_gpus_without_affinity() -> None:
    """The profile's GPUs report no NUMA affinity, but the node has one NUMA node: pinned pods
    still place, and their NUMA node is reported."""
    topo = discovered("dgx1-v100", "v100")
    assert len(topo.numa_nodes) == 1
    obj = pod("p", cpu="8", gpus=2, annotations={"topos.io/numa-policy": "single-numa"})
    result = run(obj, [gpu_node("v100", topo)])
    assert isinstance(result, Decision)
    assert result.placement.numa == (topo.numa_nodes[0].id,)
