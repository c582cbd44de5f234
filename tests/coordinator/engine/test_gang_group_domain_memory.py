"""A gang that stays in one domain (``topos.io/gang-topology``, required) keeps its later pods
there: a replacement for a member that is gone goes where the survivor runs, and waits while
that domain is full even with a whole free domain beside it; a member beyond the minimum
likewise. On the in-memory cluster, with the runtime's own ticker."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.polling import eventually

RACK = "example.com/rack"
RACKS = {"n0": "rack-a", "n1": "rack-a", "n2": "rack-b", "n3": "rack-b"}
Fixture = tuple[MemoryCluster, GangRuntime]


@pytest.fixture
async def running() -> AsyncIterator[Fixture]:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = MemoryCluster(inventory)
    for name, rack in RACKS.items():
        topology = discover_profile("dgx-h100", hostname=name)
        cluster.add_node(name, labels={RACK: rack}, topology=topology)
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.02), podgroups={})
    async with runtime, gangs:
        yield cluster, gangs


def member(name: str, size: int = 2) -> dict[str, object]:
    return pod(
        name,
        namespace="ml",
        gpus=8,
        gang=("train", size),
        annotations={"topos.io/gang-topology": RACK},
    )


def node_of(cluster: MemoryCluster, name: str) -> str | None:
    found = cluster.pod("ml", name)
    return None if found is None else found["spec"].get("nodeName")


def condition(cluster: MemoryCluster, name: str) -> str:
    found = cluster.pod("ml", name) or {}
    for c in (found.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return str(c.get("message", ""))
    return ""


async def test_a_replacement_goes_to_the_survivors_rack_and_waits_while_it_is_full(
    running: Fixture,
) -> None:
    cluster, _ = running
    for k in range(2):
        cluster.create_pod(member(f"w-{k}"))
    await eventually(
        lambda: all(node_of(cluster, f"w-{k}") for k in range(2)), what="both members bound"
    )
    nodes = {node_of(cluster, f"w-{k}") for k in range(2)}
    (rack,) = {RACKS[n] for n in nodes if n}
    lost = next(n for n in nodes if n)
    gone = next(f"w-{k}" for k in range(2) if node_of(cluster, f"w-{k}") == lost)
    # The member's node is taken by another pod as it goes: its rack is full.
    cluster.delete_pod("ml", gone)
    cluster.create_pod(pod("other", namespace="ml", gpus=8, node=lost, scheduler=None))
    cluster.create_pod(member("w-new"))
    await eventually(
        lambda: f"{RACK}={rack}" in condition(cluster, "w-new"),
        what="the replacement waiting for its rack",
    )
    assert node_of(cluster, "w-new") is None  # the other rack is free, and not taken
    cluster.delete_pod("ml", "other")
    await eventually(lambda: node_of(cluster, "w-new") == lost, what="the replacement bound")


async def test_a_member_beyond_the_minimum_joins_its_gangs_rack(running: Fixture) -> None:
    cluster, _ = running
    for k in range(2):
        cluster.create_pod(member(f"w-{k}"))
    await eventually(
        lambda: all(node_of(cluster, f"w-{k}") for k in range(2)), what="both members bound"
    )
    (rack,) = {RACKS[n] for k in range(2) if (n := node_of(cluster, f"w-{k}"))}
    cluster.create_pod(member("w-2"))
    message = f"pod group train stays in {RACK}={rack}, where its members run"
    await eventually(lambda: message in condition(cluster, "w-2"), what="w-2 told why it waits")
    assert node_of(cluster, "w-2") is None
