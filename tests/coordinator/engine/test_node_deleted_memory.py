"""A deleted Node is a cause of recovery, on the in-memory cluster: a gang member bound to a Node
that was deleted is evicted with a ``Rescheduled`` Event saying so (its replacement goes through
the gang step like any recovered member), and the members on healthy nodes stay. An eviction is
for the pod decided on only: one re-created under that name since is left alone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.ports import PodRef
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.polling import eventually


def member(name: str) -> dict[str, Any]:
    return pod(name, namespace="ml", gang=("g", 2), gpus=8, cpu=None, memory=None)


@dataclass
class Running:
    cluster: MemoryCluster
    gangs: GangRuntime


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = MemoryCluster(inventory)
    for name in ("h100-0", "h100-1", "h100-2"):
        cluster.add_node(name, topology=discover_profile("dgx-h100", hostname=name))
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05, backoff_s=0.5))
    async with runtime, gangs:
        yield Running(cluster, gangs)


@pytest.fixture
def cluster(running: Running) -> MemoryCluster:
    return running.cluster


def uid_of(cluster: MemoryCluster, name: str) -> str | None:
    obj = cluster.pod("ml", name)
    return None if obj is None else str(obj["metadata"]["uid"])


def node_of(cluster: MemoryCluster, name: str) -> str | None:
    obj = cluster.pod("ml", name)
    return None if obj is None else obj["spec"].get("nodeName")


async def test_a_member_on_a_deleted_node_is_moved_with_an_event(cluster: MemoryCluster) -> None:
    cluster.create_pod(member("g-0"))
    cluster.create_pod(member("g-1"))
    await eventually(
        lambda: node_of(cluster, "g-0") and node_of(cluster, "g-1"), what="both members bound"
    )
    gone = node_of(cluster, "g-1")
    stays = node_of(cluster, "g-0")
    assert gone is not None

    cluster.remove_node(gone)

    await eventually(lambda: cluster.pod("ml", "g-1") is None, what="g-1 evicted")
    (event,) = [e for e in cluster.events("ml", "g-1") if e["reason"] == "Rescheduled"]
    assert event["type"] == "Warning"
    assert f"node {gone} was deleted (its Node object is gone)" in event["message"]
    assert "1 of 2 members move" in event["message"]
    assert node_of(cluster, "g-0") == stays  # fewest moves: the healthy member stays


async def test_an_eviction_for_a_pod_re_created_since_leaves_the_new_one_alone(
    cluster: MemoryCluster,
) -> None:
    old = cluster.create_pod(pod("w", namespace="ml", scheduler=None))
    cluster.delete_pod("ml", "w")
    new = cluster.create_pod(pod("w", namespace="ml", scheduler=None))

    await cluster.evict(PodRef("ml", "w", old["metadata"]["uid"]))
    again = cluster.pod("ml", "w")
    assert again is not None
    assert again["metadata"]["uid"] == new["metadata"]["uid"]

    await cluster.evict(PodRef("ml", "w", new["metadata"]["uid"]))
    assert cluster.pod("ml", "w") is None


def lone(name: str, node: str, *, owned: bool) -> dict[str, Any]:
    obj = pod(name, namespace="ml", gpus=1, node_selector={"kubernetes.io/hostname": node})
    if owned:
        ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "uid-web"}
        obj["metadata"]["ownerReferences"] = [{**ref, "controller": True}]
    return obj


async def test_a_lone_pod_no_controller_would_recreate_is_left_on_a_notready_node(
    cluster: MemoryCluster,
) -> None:
    """An eviction deletes a bare pod for good: on a node that turns NotReady it stays, with a
    Warning Event saying why (kube's NoExecute taints evict it after its tolerations, as any
    pod); a ReplicaSet's pod there is moved. Once the Node is deleted the bare pod goes too
    (nothing is left to run it)."""
    cluster.create_pod(lone("bare", "h100-0", owned=False))
    cluster.create_pod(lone("replica", "h100-0", owned=True))
    await eventually(
        lambda: node_of(cluster, "bare") and node_of(cluster, "replica"), what="both bound"
    )

    cluster.update_node("h100-0", ready=False)

    await eventually(lambda: cluster.pod("ml", "replica") is None, what="the replica moved")
    (moved,) = [e for e in cluster.events("ml", "replica") if e["reason"] == "Rescheduled"]
    assert "node h100-0 is NotReady" in moved["message"]
    await eventually(
        lambda: any(e["reason"] == "NotRescheduled" for e in cluster.events("ml", "bare")),
        what="the bare pod's Event",
    )
    (left,) = [e for e in cluster.events("ml", "bare") if e["reason"] == "NotRescheduled"]
    assert left["type"] == "Warning"
    assert left["message"].startswith(
        "node h100-0 is NotReady: this pod has no controller that would create it again, so "
        "it is not moved (an eviction would delete it for good)"
    )
    assert node_of(cluster, "bare") == "h100-0"

    cluster.remove_node("h100-0")
    await eventually(lambda: cluster.pod("ml", "bare") is None, what="the bare pod gone")


async def test_a_gang_of_bare_pods_is_not_torn_down_when_one_member_s_node_fails(
    cluster: MemoryCluster,
) -> None:
    """Pods applied by hand as a gang (no controller) are not evicted when a member's node turns
    NotReady: each eviction would delete a member for good, and no gang could form again. The
    member on that node gets a ``NotRescheduled`` Event; its gang-mate is left alone; a
    ReplicaSet's pod on the same node is still moved."""
    cluster.create_pod(member("g-0"))
    cluster.create_pod(member("g-1"))
    await eventually(
        lambda: node_of(cluster, "g-0") and node_of(cluster, "g-1"), what="both members bound"
    )
    down = node_of(cluster, "g-1")
    assert down is not None
    uids = {n: uid_of(cluster, n) for n in ("g-0", "g-1")}
    replica = pod("replica", namespace="ml", node_selector={"kubernetes.io/hostname": down})
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "uid-web"}
    replica["metadata"]["ownerReferences"] = [{**ref, "controller": True}]
    cluster.create_pod(replica)
    await eventually(lambda: node_of(cluster, "replica"), what="the replica bound")

    cluster.update_node(down, ready=False)

    await eventually(lambda: cluster.pod("ml", "replica") is None, what="the replica moved")
    await eventually(
        lambda: any(e["reason"] == "NotRescheduled" for e in cluster.events("ml", "g-1")),
        what="g-1's Event",
    )
    (left,) = [e for e in cluster.events("ml", "g-1") if e["reason"] == "NotRescheduled"]
    assert left["message"].startswith(f"node {down} is NotReady: this pod has no controller")
    for name, uid in uids.items():
        assert uid_of(cluster, name) == uid, f"{name} was evicted"
    assert not [e for e in cluster.events("ml", "g-0") if "Rescheduled" in e["reason"]]


async def test_a_pod_bound_to_a_node_already_notready_is_moved(
    cluster: MemoryCluster, running: Running
) -> None:
    """A node NotReady with nothing on it is no failure yet (every new Node is NotReady until its
    kubelet reports); a ReplicaSet's pod bound there afterwards (by hand: ``spec.nodeName``) is
    moved like one that was there when the node failed."""
    cluster.update_node("h100-2", ready=False)
    recovery = running.gangs.recovery
    assert recovery is not None
    assert recovery.check() is None  # looked at before the pod comes: nothing to move
    late = pod("late", namespace="ml", node="h100-2")
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "uid-web"}
    late["metadata"]["ownerReferences"] = [{**ref, "controller": True}]
    cluster.create_pod(late)

    await eventually(lambda: cluster.pod("ml", "late") is None, what="the late pod moved")
    (moved,) = [e for e in cluster.events("ml", "late") if e["reason"] == "Rescheduled"]
    assert moved["message"].startswith("node h100-2 is NotReady")
