"""Pods are told apart by UID: a pod deleted and applied again under the same name is a new pod,
and whatever the scheduler held for the old one (room on a node, a queue entry, the explanation
last posted) ends the moment it is gone. The queue and the view on their own, then the scheduler
over the in-memory cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.queue import SchedulingQueue
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement, PodInfo, bound_pod_info
from coordinator.engine.ports import PodRef
from coordinator.engine.service import SchedulerRuntime
from coordinator.engine.view import ClusterView, node_info
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.clock import ManualClock

NODE = "h100-0"
PORTS = ({"containerPort": 80, "hostPort": 8080},)

# --- the queue ----------------------------------------------------------------------------------


def removals(queue: SchedulingQueue) -> list[tuple[str, bool]]:
    seen: list[tuple[str, bool]] = []
    queue.on_removed = lambda entry, gone: seen.append((entry.uid, gone))
    return seen


def test_a_pod_recreated_under_its_name_replaces_the_old_one_even_mid_attempt() -> None:
    q = SchedulingQueue(clock=ManualClock())
    seen = removals(q)
    q.add(pod("p", gpus=1, uid="uid-1"))
    old = q.pop()
    assert old is not None
    q.add(pod("p", gpus=1, uid="uid-2"))
    assert seen == [("uid-1", True)]
    q.failed(old, message="decided for the old pod")  # its attempt ends after it is gone
    new = q.named("default/p")
    assert new is not None
    assert new.uid == "uid-2"
    assert q.entry("uid-1") is None
    assert q.pop() is new  # the new pod is tried at once, not parked with the old one's failure


def test_the_queue_tells_a_bound_pod_from_a_deleted_one() -> None:
    q = SchedulingQueue(clock=ManualClock())
    seen = removals(q)
    for name in ("in-flight", "bound", "deleted", "listed-away"):
        q.add(pod(name, gpus=1, uid=f"uid-{name}"))
    q.delete(pod("bound", gpus=1, uid="uid-bound", node=NODE), gone=False)
    q.delete(pod("deleted", gpus=1, uid="uid-deleted"), gone=True)
    flying = q.pop()
    assert flying is not None
    assert flying.uid == "uid-in-flight"
    q.replace([])  # a re-list: gone or bound, nobody knows which; the attempt in flight stays
    assert seen == [("uid-bound", False), ("uid-deleted", True), ("uid-listed-away", False)]
    assert q.named("default/in-flight") is flying
    assert q.delete(pod("never-seen", uid="uid-x"), gone=True) is None


# --- the view -----------------------------------------------------------------------------------


@pytest.fixture
def one_node() -> tuple[MemoryCluster, ClusterView, ManualClock]:
    clock = ManualClock()
    inventory = Inventory(stale_ttl_s=3600)
    cluster = MemoryCluster(inventory)
    cluster.add_node(NODE, topology=discover_profile("dgx-h100", hostname=NODE))
    return cluster, ClusterView(inventory, clock=clock, assume_ttl_s=30.0), clock


def request(obj: Mapping[str, Any]) -> PodRequest:
    parsed = parse_pod(obj)
    assert isinstance(parsed, PodRequest)
    return parsed


def fits(view: ClusterView, gpus: int) -> bool:
    probe = request(pod(f"probe-{gpus}", gpus=gpus, uid=f"uid-probe-{gpus}"))
    return isinstance(schedule_one(probe, view.snapshot(), build_framework()), Decision)


WHOLE_NODE = Placement(gpus=tuple(range(8)))


def test_room_held_for_a_pod_bound_and_deleted_before_any_snapshot_is_free_at_once(
    one_node: tuple[MemoryCluster, ClusterView, ManualClock],
) -> None:
    cluster, view, _ = one_node
    created = cluster.create_pod(pod("short", gpus=8))
    view.assume(request(created), NODE, WHOLE_NODE)
    asyncio.run(cluster.bind(PodRef.of(created), NODE, {}))  # the watch shows it bound…
    view.bind_done(created["metadata"]["uid"])
    cluster.delete_pod("default", "short")  # …and gone, before anyone took a snapshot
    assert view.held(created["metadata"]["uid"]) is None
    assert fits(view, 8)


def test_releasing_a_pod_frees_its_room_and_tells_the_scheduler(
    one_node: tuple[MemoryCluster, ClusterView, ManualClock],
) -> None:
    _, view, _ = one_node
    released: list[PodInfo | None] = []
    view.on_release = released.append
    view.assume(request(pod("a", gpus=8, uid="uid-a")), NODE, WHOLE_NODE)
    view.bind_done("uid-a")
    assert not fits(view, 1)
    assert view.release("uid-a")
    assert fits(view, 8)
    assert not view.release("uid-a")  # twice (bind failure after deletion): nothing more
    assert [p.uid if p else None for p in released] == ["uid-a"]  # the pod that held it


def test_two_pods_of_one_name_hold_room_each_for_itself(
    one_node: tuple[MemoryCluster, ClusterView, ManualClock],
) -> None:
    _, view, _ = one_node
    view.assume(request(pod("p", gpus=4, uid="uid-old")), NODE, Placement(gpus=(0, 1, 2, 3)))
    view.assume(request(pod("p", gpus=4, uid="uid-new")), NODE, Placement(gpus=(4, 5, 6, 7)))
    assert not fits(view, 1)
    view.release("uid-old")
    held = view.held("uid-new")
    assert held is not None
    assert held.key == "default/p"
    assert fits(view, 4)
    assert not fits(view, 5)


def test_the_confirmation_deadline_is_only_a_safety_net(
    one_node: tuple[MemoryCluster, ClusterView, ManualClock],
) -> None:
    _, view, clock = one_node
    released: list[PodInfo | None] = []
    view.on_release = released.append
    view.assume(request(pod("lost", gpus=8, uid="uid-lost")), NODE, WHOLE_NODE)
    assert view.next_expiry_in() is None  # a bind in flight is never expired
    view.bind_done("uid-lost")  # bound, but the watch never shows it
    clock.now += 29
    assert view.expire() == 0
    assert view.next_expiry_in() == pytest.approx(1.0)
    clock.now += 2
    assert view.expire() == 1
    assert released == [None]
    assert fits(view, 8)


def test_a_pod_counts_once_from_its_assumption_to_its_bind_seen(
    one_node: tuple[MemoryCluster, ClusterView, ManualClock],
) -> None:
    """The room a pod holds stays counted exactly once while its bind goes through: assumed,
    bound and seen on the watch, with another pod assumed before and after a snapshot."""
    cluster, view, _ = one_node
    first = cluster.create_pod(pod("first", gpus=4))
    view.assume(request(first), NODE, Placement(gpus=(0, 1, 2, 3)))
    assert fits(view, 4)
    assert not fits(view, 5)
    second = cluster.create_pod(pod("second", gpus=2))
    view.assume(request(second), NODE, Placement(gpus=(4, 5)))  # the base is unchanged
    assert fits(view, 2)
    assert not fits(view, 3)
    asyncio.run(cluster.bind(PodRef.of(first), NODE, {}))  # the watch shows the first bound…
    view.bind_done(first["metadata"]["uid"])
    third = cluster.create_pod(pod("third", gpus=1))
    view.assume(request(third), NODE, Placement(gpus=(6,)))  # …and a third is assumed with it
    assert view.held(first["metadata"]["uid"]) is None
    assert fits(view, 1)
    assert not fits(view, 2)
    assert view.release(second["metadata"]["uid"])
    assert fits(view, 3)
    assert not fits(view, 4)
    asyncio.run(cluster.bind(PodRef.of(third), NODE, {}))
    view.bind_done(third["metadata"]["uid"])
    assert fits(view, 3)  # the third pod, now seen bound, still counts once
    assert not fits(view, 4)
    assert view.assumed_count == 0


def test_the_views_node_is_the_one_built_afresh_as_pods_come_and_go(
    one_node: tuple[MemoryCluster, ClusterView, ManualClock],
) -> None:
    """Binds seen are added to the cached node instead of rebuilding it; whatever the order of
    assumptions, binds, deletions and node changes, the node equals one built from scratch."""
    cluster, view, _ = one_node
    inventory = view.inventory

    def afresh() -> NodeInfo:
        state = inventory.scheduling_node(NODE)
        assert state is not None
        pods = tuple(bound_pod_info(b) for b in inventory.bound_pods(NODE))
        extra = [a.info for a in (view.held(uid) for uid in sorted(held)) if a is not None]
        return node_info(state, (*pods, *extra))

    held: set[str] = set()
    node = view.snapshot().get(NODE)
    made = [cluster.create_pod(pod(f"p{i}", gpus=1, ports=PORTS if i else ())) for i in range(3)]
    for i, obj in enumerate(made):
        uid = obj["metadata"]["uid"]
        view.assume(request(obj), NODE, Placement(gpus=(i,)))
        held.add(uid)
        assert view.snapshot().get(NODE) == afresh()
        gpu = discover_profile("dgx-h100", hostname=NODE).gpus[i].uuid
        asyncio.run(cluster.bind(PodRef.of(obj), NODE, {"topos.io/assigned-gpus": gpu}))
        view.bind_done(uid)
        held.discard(uid)
        node = view.snapshot().get(NODE)
        assert node == afresh()
        assert node is not None
        assert len(node.free_gpus) == 7 - i
    cluster.delete_pod("default", "p0")
    assert view.snapshot().get(NODE) == afresh()
    cluster.update_node(NODE, unschedulable=True)
    node = view.snapshot().get(NODE)
    assert node == afresh()
    assert node is not None
    assert node.unschedulable
    assert len(node.free_gpus) == 6


# --- the scheduler over the in-memory cluster ---------------------------------------------------


class GatedCluster(MemoryCluster):
    """Binds of pods named in ``held`` wait until the test opens ``gate``."""

    def __init__(self, inventory: Inventory) -> None:
        super().__init__(inventory)
        self.gate = asyncio.Event()
        self.held: set[str] = set()

    async def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
        if pod.name in self.held:
            await self.gate.wait()
        await super().bind(pod, node, annotations)


@pytest.fixture
async def memory() -> AsyncIterator[tuple[GatedCluster, SchedulerRuntime]]:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = GatedCluster(inventory)
    cluster.add_node(NODE, topology=discover_profile("dgx-h100", hostname=NODE))
    runtime = memory_runtime(inventory, cluster)
    async with runtime:
        yield cluster, runtime
        cluster.gate.set()


async def until(check: Callable[[], bool]) -> None:
    """Wait for ``check`` (the test fails after a generous 10 s; these used to take 60)."""
    async with asyncio.timeout(10):
        while True:
            if check():
                return
            await asyncio.sleep(0.01)


async def bound(cluster: MemoryCluster, name: str) -> dict[str, Any]:
    """The pod once bound."""
    await until(
        lambda: bool((cluster.pod("default", name) or {"spec": {}})["spec"].get("nodeName"))
    )
    obj = cluster.pod("default", name)
    assert obj is not None
    return obj


def events(cluster: MemoryCluster, reason: str, uid: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.events("default")
        if e["reason"] == reason and e["involvedObject"]["uid"] == uid
    ]


async def test_a_pod_applied_again_under_its_name_binds_at_once_with_its_own_event(
    memory: tuple[GatedCluster, SchedulerRuntime],
) -> None:
    cluster, runtime = memory
    first = cluster.create_pod(pod("train", gpus=8))
    await bound(cluster, "train")
    cluster.delete_pod("default", "train")
    second = cluster.create_pod(pod("train", gpus=8))
    again = await bound(cluster, "train")
    await runtime.settle()
    assert again["metadata"]["uid"] == second["metadata"]["uid"]
    for obj in (first, second):
        (event,) = events(cluster, "Scheduled", obj["metadata"]["uid"])
        assert event["message"].startswith(f"Successfully assigned default/train to {NODE}")
    attempt = runtime.scheduler.last_attempt("default/train")
    assert attempt is not None
    assert (attempt.uid, attempt.outcome) == (second["metadata"]["uid"], "bound")


async def test_a_waiting_pod_applied_again_is_explained_again(
    memory: tuple[GatedCluster, SchedulerRuntime],
) -> None:
    cluster, runtime = memory
    cluster.create_pod(pod("fill", gpus=8))
    first = cluster.create_pod(pod("wait", gpus=1))
    await runtime.settle()
    cluster.delete_pod("default", "wait")
    second = cluster.create_pod(pod("wait", gpus=1))
    await runtime.settle()
    message = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    for obj in (first, second):
        (event,) = events(cluster, "FailedScheduling", obj["metadata"]["uid"])
        assert event["message"] == message
    now = cluster.pod("default", "wait")
    assert now is not None
    (condition,) = now["status"]["conditions"]
    assert (condition["status"], condition["message"]) == ("False", message)


async def test_a_pod_deleted_while_its_bind_is_in_flight_frees_its_gpus_at_once(
    memory: tuple[GatedCluster, SchedulerRuntime],
) -> None:
    cluster, runtime = memory
    cluster.held.add("slow")
    cluster.create_pod(pod("slow", gpus=8))
    await until(lambda: runtime.scheduler.binder.in_flight == 1)
    cluster.create_pod(pod("next", gpus=8))
    await until(lambda: runtime.scheduler.last_attempt("default/next") is not None)
    attempt = runtime.scheduler.last_attempt("default/next")
    assert attempt is not None
    assert attempt.outcome == "unschedulable"  # the slow pod's GPUs are held for it
    cluster.delete_pod("default", "slow")
    placed = await bound(cluster, "next")  # while the slow pod's bind is still on the wire
    assert runtime.scheduler.binder.in_flight == 1
    cluster.gate.set()
    await runtime.settle()
    assert placed["spec"]["nodeName"] == NODE
    assert cluster.binds == 1
    assert runtime.scheduler.stats.bind_conflicts == 1
