"""A GPU several pods share (docs/sharing.md): the inventory lists every holder with its share, and
two pods a time-slicing device plugin gave replicas of the GPU they were assigned are not a
mismatch — only a pod given another GPU than its own is."""

from __future__ import annotations

from agent.devices import discover_profile
from coordinator.inventory.state import BoundPod, GpuHolder, KubeNode
from coordinator.inventory.store import Inventory
from tests.support.clock import ManualClock
from tests.support.stream_frames import allocation

NODE = "h100"
TOPO = discover_profile("dgx-h100", hostname=NODE)


def _shared(name: str, gpu: int, share: str) -> BoundPod:
    return BoundPod(
        uid=f"uid-{name}",
        namespace="ml",
        name=name,
        node=NODE,
        scheduler="topos",
        requests={"nvidia.com/gpu": 1},  # one time-slicing replica
        assigned_gpus=(TOPO.gpus[gpu].uuid,),
        annotations={"topos.io/gpu-share": share},
    )


def _inventory(*given: tuple[str, int, int]) -> Inventory:
    inv = Inventory(clock=ManualClock())
    inv.upsert_node(
        KubeNode(
            name=NODE,
            labels={"nvidia.com/gpu.sharing-strategy": "time-slicing"},
            allocatable={"nvidia.com/gpu": 32, "pods": 110},
        )
    )
    # the device plugin names replicas "<uuid>::<n>"
    allocs = tuple(
        allocation(pod, f"{TOPO.gpus[gpu].uuid}::{replica}", namespace="ml")
        for pod, gpu, replica in given
    )
    inv.apply_hello(NODE, agent_id="a", agent_version="t", seq=0, topology=TOPO, allocations=allocs)
    return inv


def test_replicas_of_the_assigned_gpu_are_no_mismatch_and_both_holders_are_listed() -> None:
    inv = _inventory(("a", 2, 0), ("b", 2, 3))
    inv.upsert_pod(_shared("a", 2, "fraction=0.5,memory=40Gi"))
    inv.upsert_pod(_shared("b", 2, "fraction=0.25,memory=20Gi"))
    state = inv.node(NODE)
    assert state is not None
    assert state.mismatches == ()
    use = {u.uuid: u for u in state.gpu_use}[TOPO.gpus[2].uuid]
    assert use.holders == (
        GpuHolder(pod="ml/a", source="agent", fraction=0.5, memory_mib=40 * 1024),
        GpuHolder(pod="ml/b", source="agent", fraction=0.25, memory_mib=20 * 1024),
    )
    assert use.free_fraction == 0.25


def test_a_shared_pod_given_a_replica_of_another_gpu_is_a_mismatch() -> None:
    inv = _inventory(("a", 2, 0), ("b", 5, 1))
    inv.upsert_pod(_shared("a", 2, "fraction=0.5"))
    inv.upsert_pod(_shared("b", 2, "fraction=0.5"))
    state = inv.node(NODE)
    assert state is not None
    (mismatch,) = state.mismatches
    assert mismatch.pod == "b"
    assert mismatch.message == "assigned GPU 2 but the node gave GPU 5"
    use = {u.uuid: u for u in state.gpu_use}
    assert [h.pod for h in use[TOPO.gpus[5].uuid].holders] == ["ml/b"]
