"""A node's allocatable derived from its hardware, as the kubelet and the NVIDIA device plugin
(MIG strategy "mixed") would report it — and the same answer from every place that derives it:
the inventory (an agent without a Node object), the in-memory cluster, the simulator and the
devcluster's simulated kubelets."""

from __future__ import annotations

import msgspec
import pytest

from common.allocatable import allocatable_from_topology
from common.model import NodeTopology, NumaNode
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.core.podspec.resources import quantity
from coordinator.inventory.store import Inventory
from coordinator.sim.cluster import ClusterSpec, NodeGroup, build_nodes
from devcluster.nodes import capacity
from tests.support.mig import mig_instance
from tests.support.sched_hw import a100_mig, dgx_h100, topology

GiB = 2**30


def with_stale_mig_on_whole_gpu(topo: NodeTopology, index: int) -> NodeTopology:
    """GPU ``index`` with MIG mode off but an instance still listed (a layout left behind)."""
    gpus = list(topo.gpus)
    left = mig_instance("1g.10gb", gi=7, start=0, size=1, memory_mib=9728, uuid="MIG-left")
    gpus[index] = msgspec.structs.replace(gpus[index], mig_enabled=False, mig_instances=(left,))
    return msgspec.structs.replace(topo, gpus=tuple(gpus))


def test_whole_gpus_and_mig_instances_are_separate_resources() -> None:
    topo = a100_mig("n")  # GPU 0: 7×1g.10gb, GPU 1: 2×3g.40gb, GPUs 2-7 whole
    assert allocatable_from_topology(topo) == {
        "pods": 110,
        "nvidia.com/gpu": 6,
        "nvidia.com/mig-1g.10gb": 7,
        "nvidia.com/mig-3g.40gb": 2,
        "cpu": 128_000,
        "memory": 1024 * GiB,
    }


def test_instances_on_a_gpu_with_mig_mode_off_are_no_devices() -> None:
    alloc = allocatable_from_topology(with_stale_mig_on_whole_gpu(dgx_h100("n"), 3))
    assert alloc["nvidia.com/gpu"] == 8
    assert not [k for k in alloc if k.startswith("nvidia.com/mig-")]


def test_resources_without_devices_are_left_out() -> None:
    slice_ = mig_instance("3g.40gb", gi=1, start=4, size=4, memory_mib=40192, uuid="MIG-a")
    all_mig = topology(
        "n",
        links=[["X", "NV12"], ["NV12", "X"]],
        product="NVIDIA-A100-SXM4-80GB",
        memory_mib=81920,
        gpu_numa=[0, 0],
        numa=(NumaNode(id=0, cpus=tuple(range(16)), memory_mib=64 * 1024),),
        mig={0: [slice_], 1: [slice_]},
    )
    assert allocatable_from_topology(all_mig) == {
        "pods": 110,
        "nvidia.com/mig-3g.40gb": 2,
        "cpu": 16_000,
        "memory": 64 * GiB,
    }
    cpu_only = msgspec.structs.replace(all_mig, gpus=(), links=())
    assert allocatable_from_topology(cpu_only) == {"pods": 110, "cpu": 16_000, "memory": 64 * GiB}


def test_a_compute_instance_split_keeps_the_device_plugins_name() -> None:
    topo = a100_mig("n")
    split = msgspec.structs.replace(topo.gpus[1].mig_instances[0], profile="1c.3g.40gb")
    gpus = list(topo.gpus)
    gpus[1] = msgspec.structs.replace(gpus[1], mig_instances=(split,))
    alloc = allocatable_from_topology(msgspec.structs.replace(topo, gpus=tuple(gpus)))
    assert alloc["nvidia.com/mig-1c.3g.40gb"] == 1
    assert "nvidia.com/mig-3g.40gb" not in alloc


@pytest.mark.parametrize("hardware", ["a100-mig", "h100-stale-mig"])
async def test_every_place_that_derives_allocatable_agrees(hardware: str) -> None:
    topo = (
        a100_mig("n") if hardware == "a100-mig" else with_stale_mig_on_whole_gpu(dgx_h100("n"), 0)
    )
    expected = allocatable_from_topology(topo)

    agent_only = Inventory()
    agent_only.apply_hello(
        "n", agent_id="a", agent_version="1", seq=0, topology=topo, allocations=()
    )
    state = agent_only.node("n")
    assert state is not None
    assert state.allocatable == expected

    memory = MemoryCluster(Inventory())
    memory.add_node("n", topology=topo)
    node = memory.inventory.node("n")
    assert node is not None
    assert node.allocatable == expected

    spec = ClusterSpec(name="c", groups=(NodeGroup(profile="p", count=1, name_prefix="n"),))
    (sim,) = build_nodes(spec, lambda _profile: topo)
    assert dict(sim.allocatable) == expected

    kubelet = {k: quantity(k, v) for k, v in capacity(topo).items()}
    assert kubelet == {**expected, "ephemeral-storage": 1000 * GiB}
