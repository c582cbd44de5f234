"""A gang that loses a race while its binds are on the wire (a member deleted and recreated by its
controller mid-bind) completes right after its backoff, on the in-memory cluster — never after
the 60 s unschedulable flush — and its bound bare member is kept, not evicted for good."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
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


class GatedCluster(MemoryCluster):
    """Holds the first bind of ``hold`` until the test opens ``gate``."""

    def __init__(self, inventory: Inventory, hold: str) -> None:
        super().__init__(inventory)
        self.hold = hold
        self.held = asyncio.Event()
        self.gate = asyncio.Event()

    async def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
        if pod.key == self.hold:
            self.hold = ""
            self.held.set()
            await self.gate.wait()
        await super().bind(pod, node, annotations)


def member(name: str, uid: str) -> dict[str, Any]:
    return pod(name, namespace="ml", uid=uid, gang=("g", 2), gpus=8, cpu=None, memory=None)


@pytest.fixture
async def gated() -> AsyncIterator[tuple[GatedCluster, GangRuntime]]:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = GatedCluster(inventory, hold="ml/g-1")
    for name in ("h100-0", "h100-1"):
        cluster.add_node(name, topology=discover_profile("dgx-h100", hostname=name))
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05, backoff_s=0.5))
    async with runtime, gangs:
        yield cluster, gangs


def node_of(cluster: MemoryCluster, name: str) -> str | None:
    obj = cluster.pod("ml", name)
    return None if obj is None else obj["spec"].get("nodeName")


async def test_a_gang_whose_member_was_replaced_mid_bind_completes_after_its_backoff(
    gated: tuple[GatedCluster, GangRuntime],
) -> None:
    cluster, gangs = gated
    cluster.create_pod(member("g-0", "uid-g-0"))
    cluster.create_pod(member("g-1", "uid-g-1"))
    await asyncio.wait_for(cluster.held.wait(), 10)
    # Its controller replaced g-1 while the bind was on the wire: that bind must fail.
    cluster.delete_pod("ml", "g-1")
    again = cluster.create_pod(member("g-1", "uid-g-1-again"))["metadata"]["uid"]
    # The replacement is popped, tried, and waits for the attempt in flight.
    queue = gangs.step.scheduler.queue
    await eventually(
        lambda: (e := queue.entry(again)) is not None and e.attempts > 0,
        what="the replacement to be tried while the attempt is in flight",
        timeout_s=10,
    )
    started = time.monotonic()
    cluster.gate.set()
    await eventually(
        lambda: node_of(cluster, "g-0") and node_of(cluster, "g-1"),
        what="both members bound",
        timeout_s=10,
    )
    assert time.monotonic() - started < 10  # not the 60 s flush
    replacement = cluster.pod("ml", "g-1")
    assert replacement is not None
    assert replacement["metadata"]["uid"] == again
    assert {node_of(cluster, "g-0"), node_of(cluster, "g-1")} == {"h100-0", "h100-1"}
    status = gangs.step.manager.statuses()
    assert [(s.phase, s.members, s.bound) for s in status] == [("Bound", 2, 2)]
    assert not [e for e in cluster.events("ml", "g-0") if e["reason"] == "GangReleased"]
