"""What the node gave a pod versus what Topos assigned: the inventory keeps the kubelet's word
(``gpu_use``), lists each pod whose holdings differ from its ``topos.io/assigned-gpus`` with both
sets and their link classes, for whole GPUs and MIG devices, and keeps a report whose holding
names a device the node does not have (logged, named in the mismatch) instead of refusing it."""

from __future__ import annotations

import logging

import msgspec
import pytest

from agent.devices import discover_profile
from common.model import NodeTopology
from common.wire import ContainerAllocation, DeviceAllocation
from coordinator.inventory.mismatch import find_mismatches
from coordinator.inventory.state import BoundPod, KubeNode
from coordinator.inventory.store import Inventory
from tests.support.clock import ManualClock
from tests.support.stream_frames import allocation, mig_layout, topology

NODE = "dgx1"


@pytest.fixture
def dgx1() -> NodeTopology:
    # DGX-1 (V100): GPUs 0 and 3 are joined by two NVLinks, 0 and 4 only across the sockets.
    return discover_profile("dgx1-v100", hostname=NODE)


def _placed(topo: NodeTopology, name: str, *indices: int, uid: str = "") -> BoundPod:
    return BoundPod(
        uid=uid or f"uid-{name}",
        namespace="ml",
        name=name,
        node=NODE,
        scheduler="topos",
        requests={"nvidia.com/gpu": len(indices)},
        assigned_gpus=tuple(topo.gpus[i].uuid for i in indices),
    )


def _held(topo: NodeTopology, name: str, *indices: int) -> ContainerAllocation:
    return allocation(name, *(topo.gpus[i].uuid for i in indices), namespace="ml")


def _inventory(topo: NodeTopology, *allocs: ContainerAllocation) -> Inventory:
    inv = Inventory(clock=ManualClock())
    inv.upsert_node(KubeNode(name=NODE, allocatable={"nvidia.com/gpu": 8, "pods": 110}))
    inv.apply_hello(
        NODE, agent_id="a", agent_version="t", seq=0, topology=topo, allocations=tuple(allocs)
    )
    return inv


def test_the_node_giving_other_gpus_is_a_mismatch_naming_both_sets_and_links(
    dgx1: NodeTopology,
) -> None:
    inv = _inventory(dgx1, _held(dgx1, "train", 0, 4), _held(dgx1, "ok", 1, 2))
    inv.upsert_pod(_placed(dgx1, "train", 0, 3))
    inv.upsert_pod(_placed(dgx1, "ok", 2, 1))  # same devices, other order: no mismatch
    state = inv.node(NODE)
    assert state is not None
    (mismatch,) = state.mismatches
    assert (mismatch.namespace, mismatch.pod, mismatch.uid) == ("ml", "train", "uid-train")
    assert mismatch.message == "assigned GPUs 0,3 (NV2) but the node gave GPUs 0,4 (SYS)"
    assert mismatch.link_change == "worse"
    # the inventory records the truth: GPU 4 is held by the pod, GPU 3 is free
    use = {u.uuid: u for u in state.gpu_use}
    assert use[dgx1.gpus[4].uuid].holder == "ml/train"
    assert use[dgx1.gpus[4].uuid].source == "agent"
    assert use[dgx1.gpus[3].uuid].holder is None


def test_no_holdings_yet_is_no_verdict_and_a_pod_not_placed_by_topos_is_not_compared(
    dgx1: NodeTopology,
) -> None:
    other = msgspec.structs.replace(_placed(dgx1, "theirs", 0), assigned_gpus=())
    inv = _inventory(dgx1, _held(dgx1, "theirs", 5))
    inv.upsert_pod(_placed(dgx1, "starting", 0, 3))  # the kubelet has not started it yet
    inv.upsert_pod(other)
    assert inv.node(NODE).mismatches == ()  # type: ignore[union-attr]


def test_a_mismatch_appears_and_changes_with_the_agents_report(dgx1: NodeTopology) -> None:
    inv = _inventory(dgx1)
    inv.upsert_pod(_placed(dgx1, "train", 0, 3))
    inv.apply_delta(NODE, seq=1, gpus=(), allocations=(_held(dgx1, "train", 0, 4),))
    assert inv.node(NODE).mismatches[0].given_devices == "GPUs 0,4"  # type: ignore[union-attr]
    inv.apply_delta(NODE, seq=2, gpus=(), allocations=(_held(dgx1, "train", 6, 7),))
    (changed,) = inv.node(NODE).mismatches  # type: ignore[union-attr]
    assert changed.message == "assigned GPUs 0,3 (NV2) but the node gave GPUs 6,7 (NV1)"
    assert changed.link_change == "worse"  # one NVLink where two were chosen
    inv.delete_pod("uid-train")
    assert inv.node(NODE).mismatches == ()  # type: ignore[union-attr]


def test_mig_devices_are_named_by_profile_and_gpu() -> None:
    topo = mig_layout(topology("m", gpus=2), 0, ["3g.40gb", "1g.10gb"])
    topo = mig_layout(topo, 1, ["3g.40gb"])
    first, small = topo.gpus[0].mig_instances
    (other,) = topo.gpus[1].mig_instances
    pod = BoundPod(uid="u", namespace="ml", name="infer", node="m", assigned_gpus=(first.uuid,))  # type: ignore[arg-type]
    held = ContainerAllocation(
        namespace="ml",
        pod="infer",
        container="c",
        devices=(DeviceAllocation(resource="nvidia.com/mig-3g.40gb", ids=(other.uuid,)),),  # type: ignore[arg-type]
    )
    (mismatch,) = find_mismatches(topo, [pod], [held])
    assert (
        mismatch.message == "assigned MIG 3g.40gb on GPU 0 but the node gave MIG 3g.40gb on GPU 1"
    )
    assert mismatch.link_change == "same"
    same = find_mismatches(
        topo,
        [pod],
        [
            msgspec.structs.replace(
                held,
                devices=(
                    DeviceAllocation(resource="nvidia.com/mig-3g.40gb", ids=(first.uuid,)),  # type: ignore[arg-type]
                ),
            )
        ],
    )
    assert same == ()
    assert small.uuid  # the other instance on GPU 0 is not involved


def test_a_holding_naming_an_unknown_device_is_kept_logged_and_named(
    dgx1: NodeTopology, caplog: pytest.LogCaptureFixture
) -> None:
    bogus = allocation("train", dgx1.gpus[0].uuid, "GPU-nowhere", namespace="ml")
    with caplog.at_level(logging.WARNING, logger="coordinator.inventory.validate"):
        inv = _inventory(dgx1, bogus, _held(dgx1, "ok", 1, 2))
    assert "the kubelet says ml/train holds GPU-nowhere, not a device of this node" in caplog.text
    inv.upsert_pod(_placed(dgx1, "train", 0, 3))
    inv.upsert_pod(_placed(dgx1, "ok", 1, 2))
    state = inv.node(NODE)
    assert state is not None
    assert state.connected
    assert state.seq == 0
    (mismatch,) = state.mismatches
    assert mismatch.unknown == ("GPU-nowhere",)
    assert mismatch.link_change == "unknown-device"
    assert mismatch.message == (
        "assigned GPUs 0,3 (NV2) but the node gave GPU 0, GPU-nowhere (not a device of this node)"
    )
    use = {u.uuid: u.holder for u in state.gpu_use}
    assert use[dgx1.gpus[1].uuid] == "ml/ok"  # everyone else's holdings are recorded as ever
    assert "GPU-nowhere" not in use


def test_time_sliced_replicas_count_as_their_gpu(dgx1: NodeTopology) -> None:
    # With time-slicing or MPS the device plugin advertises each GPU once per replica.
    shared = allocation(
        "infer", f"{dgx1.gpus[2].uuid}::3", f"{dgx1.gpus[5].uuid}::0", namespace="ml"
    )
    inv = _inventory(dgx1, shared)
    inv.upsert_pod(_placed(dgx1, "infer", 2, 6))
    state = inv.node(NODE)
    assert state is not None
    assert {u.uuid: u.holder for u in state.gpu_use}[dgx1.gpus[5].uuid] == "ml/infer"
    (mismatch,) = state.mismatches
    assert mismatch.given_devices == "GPUs 2,5"
    assert mismatch.unknown == ()


def test_a_pod_recreated_under_its_name_is_not_blamed_for_its_predecessors_devices(
    dgx1: NodeTopology,
) -> None:
    inv = _inventory(dgx1)
    _placed_pod = _placed(dgx1, "worker-0", 0, 3)
    inv.upsert_pod(_placed_pod)
    inv.apply_delta(NODE, seq=1, gpus=(), allocations=(_held(dgx1, "worker-0", 0, 3),))
    inv.delete_pod(_placed_pod.uid)
    # A new worker-0 is placed on 4,5 before the agent's next report still names the old one's.
    inv.upsert_pod(_placed(dgx1, "worker-0", 4, 5, uid="uid-new"))
    state = inv.node(NODE)
    assert state is not None
    assert state.mismatches == ()
    assert {u.uuid: u.holder for u in state.gpu_use}[dgx1.gpus[0].uuid] is None
    assert inv.bound_pods(NODE)[0].held_gpus == ()
    # The agent's next report is the kubelet's word on the new pod.
    inv.apply_delta(NODE, seq=2, gpus=(), allocations=(_held(dgx1, "worker-0", 4, 6),))
    (mismatch,) = inv.node(NODE).mismatches  # type: ignore[union-attr]
    assert (mismatch.uid, mismatch.given_devices) == ("uid-new", "GPUs 4,6")
