"""Bound gang members the gang runtime learns of after it started — bound before this coordinator
took over (a predecessor's binds landing late), or by another scheduler — are counted on
whatever node they appear, and when they name a PodGroup that exists only later, from the moment
it does; pods that name no gang are never counted, however many run beside them. On the
in-memory cluster, with the runtime's own ticker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.core.gangs.identity import GangKey
from coordinator.core.gangs.manager import GangStatus
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.polling import eventually

Fixture = tuple[MemoryCluster, GangRuntime, dict[tuple[str, str], Any]]
NODES = ("h100-0", "h100-1", "h100-2")


@pytest.fixture
async def running() -> AsyncIterator[Fixture]:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = MemoryCluster(inventory)
    for name in NODES:
        cluster.add_node(name, topology=discover_profile("dgx-h100", hostname=name))
    groups: dict[tuple[str, str], Any] = {}
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.02), podgroups=groups)
    async with runtime, gangs:
        yield cluster, gangs, groups


def bound_count(gangs: GangRuntime, key: GangKey) -> int | None:
    status: GangStatus | None = gangs.step.manager.status(key)
    return None if status is None else status.bound


async def test_members_bound_after_start_count_on_any_node(running: Fixture) -> None:
    cluster, gangs, _ = running
    for i in range(30):  # pods of no gang on every node, bound before and after the members
        cluster.create_pod(pod(f"web-{i}", namespace="ml", node=NODES[i % 3], scheduler=None))
    key = GangKey("ml", "g")
    cluster.create_pod(pod("g-0", namespace="ml", node="h100-0", gang=("g", 3), gpus=8))
    cluster.create_pod(pod("g-1", namespace="ml", node="h100-2", gang=("g", 3), gpus=8))
    await eventually(lambda: bound_count(gangs, key) == 2, what="2 members counted", timeout_s=10)
    for i in range(30, 40):
        cluster.create_pod(pod(f"web-{i}", namespace="ml", node=NODES[i % 3], scheduler=None))
    cluster.create_pod(pod("g-2", namespace="ml", node="h100-1", gang=("g", 3), gpus=8))
    await eventually(lambda: bound_count(gangs, key) == 3, what="3 members counted", timeout_s=10)
    assert [s.name for s in gangs.step.manager.statuses()] == ["g"]  # no pod of no gang counted


async def test_members_naming_a_podgroup_made_later_count_from_then(running: Fixture) -> None:
    cluster, gangs, groups = running
    for i, node in enumerate(("h100-0", "h100-1")):
        member = pod(f"w-{i}", namespace="ml", node=node, gpus=8)
        member["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "train"}
        cluster.create_pod(member)
    key = GangKey("ml", "train", "pg-1")
    await gangs.runtime.settle()
    gangs.step.start()  # (runs once: a no-op if the ticker has started it)
    gangs.step.tick()  # the bound pods looked at
    assert gangs.step.manager.statuses() == []  # no PodGroup yet: no gang to count them in
    groups["ml", "train"] = {
        "metadata": {"namespace": "ml", "name": "train", "uid": "pg-1", "generation": 1},
        "spec": {"minMember": 2},
    }
    gangs.step.podgroups_changed("ml", "train")
    await eventually(lambda: bound_count(gangs, key) == 2, what="both counted", timeout_s=10)


async def test_bound_pods_relabelled_into_a_gang_beside_many_of_no_gang_count(
    running: Fixture,
) -> None:
    # Many pods of no gang share the node; the runtime looks at the one that changed.
    cluster, gangs, _ = running
    for i in range(60):
        cluster.create_pod(pod(f"web-{i}", namespace="ml", node="h100-0", scheduler=None))
    cluster.create_pod(pod("w-0", namespace="ml", node="h100-0", gpus=8))
    cluster.create_pod(pod("w-1", namespace="ml", node="h100-1", gpus=8))
    await gangs.runtime.settle()
    gangs.step.start()
    gangs.step.tick()
    assert gangs.step.manager.statuses() == []
    key = GangKey("ml", "late")
    for name in ("w-0", "w-1"):
        cluster.update_pod_metadata(
            "ml",
            name,
            labels={"topos.io/gang": "late", "topos.io/gang-min": "2"},
        )
    await eventually(lambda: bound_count(gangs, key) == 2, what="both counted", timeout_s=10)
