"""A deleted Node is a cause of recovery, on the in-memory cluster: a gang member bound to a Node
that was deleted is evicted with a ``Rescheduled`` Event saying so (its replacement goes through
the gang step like any recovered member), and the members on healthy nodes stay. An eviction is
for the pod decided on only: one re-created under that name since is left alone."""

from __future__ import annotations

from collections.abc import AsyncIterator
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


@pytest.fixture
async def cluster() -> AsyncIterator[MemoryCluster]:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = MemoryCluster(inventory)
    for name in ("h100-0", "h100-1", "h100-2"):
        cluster.add_node(name, topology=discover_profile("dgx-h100", hostname=name))
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05, backoff_s=0.5))
    async with runtime, gangs:
        yield cluster


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
