"""The inventory store: hellos and deltas from agents, Node objects and bound pods from the API
server, merged into per-node free capacity; staleness by TTL on an injected clock; change events
that tell the scheduler when a node gained capacity."""

from __future__ import annotations

import msgspec
import pytest

from common.model import GpuHealth, NvLinkHealth
from common.wire import CloseReason, FrameError, GpuState
from coordinator.inventory.state import BoundPod, KubeNode
from coordinator.inventory.store import Inventory, InventoryEvent
from tests.support.clock import ManualClock
from tests.support.stream_frames import allocation, mig_layout, topology


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def inv(clock: ManualClock) -> Inventory:
    return Inventory(stale_ttl_s=10.0, clock=clock)


def _hello(inv: Inventory, node: str = "node-a", **kw: object) -> None:
    inv.apply_hello(
        node,
        agent_id=str(kw.get("agent_id", "a1")),
        agent_version="test",
        seq=0,
        topology=kw.get("topology") or topology(node, gpus=4),  # type: ignore[arg-type]
        allocations=kw.get("allocations", ()),  # type: ignore[arg-type]
    )


def _kube_node(name: str = "node-a", gpus: int = 4, **kw: object) -> KubeNode:
    return KubeNode(
        name=name,
        allocatable={"nvidia.com/gpu": gpus, "cpu": 32000, "memory": 512 * 2**30, "pods": 110},
        labels={"topos.io/leaf": "leaf-0"},
        **kw,  # type: ignore[arg-type]
    )


def _pod(uid: str, node: str = "node-a", gpus: int = 1, scheduler: str = "default-scheduler"):
    return BoundPod(
        uid=uid,
        namespace="default",
        name=f"pod-{uid}",
        node=node,
        scheduler=scheduler,
        requests={"nvidia.com/gpu": gpus, "cpu": 1000},
    )


def test_hello_describes_the_hardware_but_only_a_node_object_makes_it_schedulable(
    inv: Inventory,
) -> None:
    _hello(inv)
    state = inv.node("node-a")
    assert state is not None
    assert state.connected
    assert not state.stale
    assert not state.schedulable  # the API server has no such node (yet)
    assert inv.unknown_nodes() == ["node-a"]
    assert state.free == {
        "nvidia.com/gpu": 4,
        "cpu": 32000,
        "memory": 524288 * 2**20,
        "pods": 110,  # the kubelet's default maxPods
    }
    assert [u.uuid for u in state.gpu_use] == [f"GPU-node-a-{i}" for i in range(4)]
    inv.upsert_node(KubeNode(name="node-a"))
    assert inv.node("node-a").schedulable  # type: ignore[union-attr]
    assert inv.unknown_nodes() == []


def test_node_object_allocatable_wins_and_pods_of_any_scheduler_count(inv: Inventory) -> None:
    _hello(inv)
    inv.upsert_node(_kube_node())
    inv.upsert_pod(_pod("p1", gpus=2, scheduler="default-scheduler"))
    inv.upsert_pod(_pod("p2", gpus=1, scheduler="volcano"))
    state = inv.node("node-a")
    assert state is not None
    assert state.free["nvidia.com/gpu"] == 1
    assert state.free["cpu"] == 30000
    assert state.free["pods"] == 108
    assert {p.scheduler for p in state.pods} == {"default-scheduler", "volcano"}
    inv.delete_pod("p1")
    assert inv.node("node-a").free["nvidia.com/gpu"] == 3  # type: ignore[union-attr]


def test_pod_moving_nodes_is_counted_once(inv: Inventory) -> None:
    inv.upsert_node(_kube_node("node-a"))
    inv.upsert_node(_kube_node("node-b"))
    inv.upsert_pod(_pod("p1", node="node-a", gpus=2))
    inv.upsert_pod(_pod("p1", node="node-b", gpus=2))
    assert inv.node("node-a").free["nvidia.com/gpu"] == 4  # type: ignore[union-attr]
    assert inv.node("node-b").free["nvidia.com/gpu"] == 2  # type: ignore[union-attr]


def test_agent_allocations_and_annotations_show_who_holds_each_gpu(inv: Inventory) -> None:
    _hello(inv, allocations=(allocation("train-0", "GPU-node-a-1"),))
    inv.upsert_pod(
        BoundPod(
            uid="u", namespace="ml", name="infer", node="node-a", assigned_gpus=("GPU-node-a-3",)
        )
    )
    holders = {u.uuid: (u.holder, u.source) for u in inv.node("node-a").gpu_use}  # type: ignore[union-attr]
    assert holders["GPU-node-a-1"] == ("default/train-0", "agent")
    assert holders["GPU-node-a-3"] == ("ml/infer", "annotation")
    assert holders["GPU-node-a-0"] == (None, None)


def test_delta_updates_gpu_state_and_unhealthy_gpus_are_not_free(inv: Inventory) -> None:
    _hello(inv)
    inv.apply_delta(
        "node-a",
        seq=1,
        gpus=(GpuState(index=2, uuid="GPU-node-a-2", healthy=False, health_reason="XID 79"),),
        allocations=None,
    )
    state = inv.node("node-a")
    assert state is not None
    assert state.topology is not None
    assert state.topology.gpus[2].health_reason == "XID 79"
    assert state.free["nvidia.com/gpu"] == 3
    assert state.seq == 1


def test_a_delta_carries_nvml_health_and_the_inventory_keeps_it(inv: Inventory) -> None:
    _hello(inv)
    link = NvLinkHealth(
        link=2, crc_errors=2341, crc_in_window=2341, status="degraded", reason="NVLink 2 degraded"
    )
    health = GpuHealth(ecc_uncorrected=0, nvlinks=(link,), status="degraded", reasons=("x",))
    inv.apply_delta(
        "node-a",
        seq=1,
        gpus=(GpuState(index=1, uuid="GPU-node-a-1", health=health),),
        allocations=None,
    )
    state = inv.node("node-a")
    assert state is not None
    assert state.topology is not None
    assert state.topology.gpus[1].health == health
    assert state.free["nvidia.com/gpu"] == 4  # degraded is still free; placement reads it later


def test_impossible_health_is_refused_naming_it(inv: Inventory) -> None:
    _hello(inv)
    before = inv.node("node-a")
    for health, words in (
        (GpuHealth(ecc_corrected=-1), "GPU 0 health: ecc_corrected is -1"),
        (
            GpuHealth(nvlinks=(NvLinkHealth(link=3), NvLinkHealth(link=3))),
            "GPU 0 health: NVLink port 3 listed twice",
        ),
        (GpuHealth(nvlinks=(NvLinkHealth(link=64),)), "GPU 0 health: NVLink port 64 is not 0..63"),
        (
            GpuHealth(nvlinks=(NvLinkHealth(link=1, replay_errors=-5),)),
            "nvlink 1 replay_errors is -5",
        ),
    ):
        with pytest.raises(FrameError, match=words):
            inv.apply_delta(
                "node-a",
                seq=1,
                gpus=(GpuState(index=0, uuid="GPU-node-a-0", health=health),),
                allocations=None,
            )
    assert inv.node("node-a") == before


def test_a_delta_that_does_not_fit_changes_nothing(inv: Inventory) -> None:
    _hello(inv)
    before = inv.node("node-a")
    generation = inv.generation
    bad = (
        GpuState(index=0, uuid="GPU-node-a-0", healthy=False),
        GpuState(index=9, uuid="GPU-node-a-9", healthy=False),
    )
    with pytest.raises(FrameError) as info:
        inv.apply_delta("node-a", seq=1, gpus=bad, allocations=None)
    assert info.value.reason is CloseReason.INVALID_STATE
    assert inv.node("node-a") == before
    assert inv.generation == generation


def test_silent_agent_goes_stale_after_the_ttl_and_recovers(
    inv: Inventory, clock: ManualClock
) -> None:
    events: list[InventoryEvent] = []
    inv.upsert_node(_kube_node())
    inv.subscribe(events.append)
    _hello(inv)
    clock.now += 9.0
    assert inv.sweep() == []
    inv.agent_disconnected("node-a", "a1")
    assert not inv.node("node-a").connected  # type: ignore[union-attr]
    assert not inv.node("node-a").stale  # type: ignore[union-attr]
    clock.now += 2.0
    assert inv.sweep() == ["node-a"]
    state = inv.node("node-a")
    assert state is not None
    assert state.stale
    assert not state.schedulable
    assert state.last_seen_age_s == pytest.approx(11.0)
    assert events[-1] == InventoryEvent("stale", "node-a", False)
    _hello(inv)
    assert events[-1] == InventoryEvent("recovered", "node-a", True)
    assert inv.node("node-a").schedulable  # type: ignore[union-attr]


def test_heartbeats_keep_a_node_fresh(inv: Inventory, clock: ManualClock) -> None:
    _hello(inv)
    for _ in range(5):
        clock.now += 8.0
        inv.touch("node-a")
        assert inv.sweep() == []


def test_capacity_gained_is_reported_when_a_pod_leaves_or_a_gpu_heals(inv: Inventory) -> None:
    events: list[InventoryEvent] = []
    inv.upsert_node(_kube_node())
    _hello(inv)
    p1 = _pod("p1", gpus=2)
    inv.upsert_pod(p1)
    inv.subscribe(events.append)
    inv.upsert_pod(_pod("p2", gpus=1))
    assert events[-1].capacity_gained is False
    inv.delete_pod("p1")
    # the event names the pod that left, as held (subscribers need not walk the node's pods)
    assert events[-1] == InventoryEvent("updated", "node-a", True, pods_only=True, left=p1)
    inv.apply_delta(
        "node-a",
        seq=1,
        gpus=(GpuState(index=0, uuid="GPU-node-a-0", healthy=False),),
        allocations=None,
    )
    assert events[-1].capacity_gained is False
    inv.apply_delta(
        "node-a",
        seq=2,
        gpus=(GpuState(index=0, uuid="GPU-node-a-0", healthy=True),),
        allocations=None,
    )
    assert events[-1].capacity_gained is True


def test_a_pod_changing_where_it_runs_gains_no_room_unless_its_requests_shrink(
    inv: Inventory,
) -> None:
    # A started or relabelled pod is one "updated" event that frees nothing: the scheduler must
    # not send every pod waiting for room back to the queue for it (kube's queueing hints).
    events: list[InventoryEvent] = []
    inv.upsert_node(_kube_node())
    inv.upsert_node(_kube_node("node-b"))
    inv.upsert_pod(_pod("p1", gpus=2))
    free = inv.node("node-a").free  # type: ignore[union-attr]
    inv.subscribe(events.append)
    inv.upsert_pod(msgspec.structs.replace(_pod("p1", gpus=2), started_at=5.0))
    # the node holds the same pods: listeners may look at that one alone
    assert events == [
        InventoryEvent(
            "updated", "node-a", False, pods_only=True, changed_in_place="p1", labels_kept=True
        )
    ]
    assert inv.node("node-a").free == free  # type: ignore[union-attr]
    assert [p.started_at for p in inv.bound_pods("node-a")] == [5.0]
    inv.upsert_pod(_pod("p1", gpus=1))  # resized in place: a GPU freed
    assert events[-1] == InventoryEvent(
        "updated", "node-a", True, pods_only=True, changed_in_place="p1", labels_kept=True
    )
    assert inv.node("node-a").free["nvidia.com/gpu"] == free["nvidia.com/gpu"] + 1  # type: ignore[union-attr]
    events.clear()
    inv.upsert_pod(_pod("p1", node="node-b", gpus=1))  # re-bound elsewhere: node-a gains
    assert [(e.node, e.capacity_gained) for e in events] == [("node-a", True), ("node-b", False)]
    assert [e.changed_in_place for e in events] == [None, None]  # pods went and came
    assert [p.uid for p in inv.bound_pods("node-b")] == ["p1"]
    assert inv.bound_pods("node-a") == ()


def test_cordoned_or_not_ready_nodes_are_not_schedulable(inv: Inventory) -> None:
    inv.upsert_node(_kube_node(unschedulable=True))
    assert not inv.node("node-a").schedulable  # type: ignore[union-attr]
    events: list[InventoryEvent] = []
    inv.subscribe(events.append)
    inv.upsert_node(_kube_node())
    assert inv.node("node-a").schedulable  # type: ignore[union-attr]
    assert events[-1].capacity_gained
    inv.upsert_node(_kube_node(ready=False))
    assert not inv.node("node-a").schedulable  # type: ignore[union-attr]


def test_relist_drops_what_the_api_server_no_longer_has(inv: Inventory) -> None:
    inv.upsert_node(_kube_node("node-a"))
    inv.upsert_node(_kube_node("node-b"))
    inv.upsert_pod(_pod("p1", node="node-a"))
    inv.upsert_pod(_pod("p2", node="node-b"))
    inv.replace_nodes([_kube_node("node-a")])
    inv.replace_pods([_pod("p2", node="node-b")])
    assert inv.names() == ["node-a", "node-b"]  # node-b still has a bound pod
    assert inv.node("node-b").ready is None  # type: ignore[union-attr]
    assert inv.node("node-a").pods == ()  # type: ignore[union-attr]
    inv.replace_pods([])
    assert inv.names() == ["node-a"]


def test_a_broken_listener_does_not_break_ingest(inv: Inventory) -> None:
    def boom(event: InventoryEvent) -> None:
        raise RuntimeError("subscriber bug")

    seen: list[InventoryEvent] = []
    inv.upsert_node(_kube_node())
    inv.subscribe(boom)
    inv.subscribe(seen.append)
    _hello(inv)
    assert seen == [InventoryEvent("updated", "node-a", True)]  # it has a topology now


def test_mig_instances_become_mig_resources_without_a_node_object(inv: Inventory) -> None:
    _hello(inv, topology=mig_layout(topology("node-a", gpus=2), 0, ["3g.40gb", "2g.20gb"]))
    free = inv.node("node-a").free  # type: ignore[union-attr]
    assert free["nvidia.com/gpu"] == 1
    assert free["nvidia.com/mig-3g.40gb"] == 1
    assert free["nvidia.com/mig-2g.20gb"] == 1


def test_ttl_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Inventory(stale_ttl_s=0)


def test_unchanged_health_does_not_claim_gained_capacity(inv: Inventory) -> None:
    _hello(inv)
    events: list[InventoryEvent] = []
    inv.subscribe(events.append)
    inv.apply_delta(
        "node-a",
        seq=1,
        gpus=(GpuState(index=0, uuid="GPU-node-a-0", memory_free_mib=100),),
        allocations=None,
    )
    assert events == [InventoryEvent("updated", "node-a", False)]


def test_the_schedulers_view_of_a_node_follows_every_change(inv: Inventory) -> None:
    """What the scheduler reads of a node (labels, capacity, topology, readiness) is what
    ``GET /v1/nodes`` shows, without who holds each device; it changes with the node."""
    _hello(inv)
    inv.upsert_node(_kube_node())
    shown, sched = inv.node("node-a"), inv.scheduling_node("node-a")
    assert shown is not None
    assert sched is not None
    assert shown.gpu_use
    assert not sched.gpu_use
    assert (sched.labels, sched.allocatable, sched.free, sched.topology, sched.schedulable) == (
        shown.labels,
        shown.allocatable,
        shown.free,
        shown.topology,
        shown.schedulable,
    )
    inv.upsert_pod(_pod("u1", gpus=3))
    assert inv.scheduling_node("node-a").free["nvidia.com/gpu"] == 1  # type: ignore[union-attr]
    inv.upsert_node(_kube_node(unschedulable=True))
    assert not inv.scheduling_node("node-a").schedulable  # type: ignore[union-attr]
    assert inv.scheduling_node("node-b") is None


def test_events_name_the_pod_that_came_and_whether_a_change_kept_its_labels(
    inv: Inventory,
) -> None:
    """What the scheduler wakes pending pods by: a pod bound somewhere (only pods it may let in
    go back), a pod that started with its labels as they were (no one), a relabel (everyone
    with affinity or spread terms)."""
    events: list[InventoryEvent] = []
    inv.upsert_node(_kube_node())
    inv.subscribe(events.append)
    bound = msgspec.structs.replace(_pod("p1"), labels={"app": "cache"})
    inv.upsert_pod(bound)
    assert (events[-1].came, events[-1].labels_kept) == (bound, False)
    inv.upsert_pod(msgspec.structs.replace(bound, started_at=1.0))
    assert (events[-1].came, events[-1].changed_in_place, events[-1].labels_kept) == (
        None,
        "p1",
        True,
    )
    inv.upsert_pod(msgspec.structs.replace(bound, labels={"app": "web"}))
    assert (events[-1].came, events[-1].labels_kept) == (None, False)
    inv.delete_pod("p1")
    assert (events[-1].came, events[-1].labels_kept) == (None, False)
