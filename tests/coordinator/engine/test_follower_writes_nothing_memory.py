"""A replica that does not lead writes nothing a leader writes: when a GPU under a gang member
fails while it follows, its recovery waits (no plan, no eviction) and its scheduling loop stays
paused; once it leads, the member is moved. (Recovery used to run on followers too.)"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from agent.devices import discover_profile
from common.wire import GpuState
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.polling import eventually


class Switch:
    """Leadership turned on and off by the test; counts who waits for it."""

    def __init__(self) -> None:
        self.leading = True
        self.waiting = 0
        self._changed = asyncio.Event()

    def is_leader(self) -> bool:
        return self.leading

    async def wait_until_leading(self) -> None:
        while not self.leading:
            self.waiting += 1
            try:
                await self._changed.wait()
            finally:
                self.waiting -= 1

    def why_not_leading(self) -> str:
        return "the test says so"

    def set(self, leading: bool) -> None:
        self.leading = leading
        self._changed.set()
        self._changed = asyncio.Event()


def member(name: str, node: str, gpu: str) -> dict[str, Any]:
    ann = {"topos.io/assigned-gpus": gpu}
    return pod(name, namespace="ml", gpus=1, gang=("train", 2), annotations=ann, node=node)


async def test_a_follower_neither_schedules_nor_recovers_until_it_leads() -> None:
    inventory = Inventory(stale_ttl_s=3600)
    memory = MemoryCluster(inventory)
    topos = {n: discover_profile("dgx-h100", hostname=n) for n in "ab"}
    for n, topo in topos.items():
        memory.add_node(n, topology=topo, allocatable={"nvidia.com/gpu": 8})
    memory.create_pod(member("train-0", "a", topos["a"].gpus[0].uuid))
    memory.create_pod(member("train-1", "a", topos["a"].gpus[1].uuid))
    runtime = memory_runtime(inventory, memory)
    switch = Switch()
    runtime.follow(switch)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05))
    async with runtime, gangs:
        await runtime.settle()
        switch.set(False)  # another replica leads now
        dead = topos["a"].gpus[0]
        inventory.apply_delta(
            "a",
            seq=1,
            gpus=(GpuState(index=0, uuid=dead.uuid, healthy=False, health_reason="XID 79"),),
            allocations=None,
        )
        memory.create_pod(pod("waiting", namespace="ml", gpus=1))
        # the loop, the gang ticker and recovery all wait for leadership
        await eventually(lambda: switch.waiting >= 3, what="every leader-only task waiting")
        assert gangs.recovery is not None
        assert gangs.recovery.plans == []
        assert memory.pod("ml", "train-0") is not None
        assert memory.pod("ml", "waiting")["spec"].get("nodeName") is None  # type: ignore[index]
        switch.set(True)
        await eventually(lambda: gangs.recovery.plans, what="the recovery plan")  # type: ignore[union-attr]
        await eventually(
            lambda: memory.pod("ml", "waiting")["spec"].get("nodeName"),  # type: ignore[index]
            what="the waiting pod bound",
        )


async def test_the_log_tells_a_replica_that_never_led_from_one_that_lost_the_lead(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inventory = Inventory(stale_ttl_s=3600)
    memory = MemoryCluster(inventory)
    memory.add_node(
        "a", topology=discover_profile("dgx-h100", hostname="a"), allocatable={"nvidia.com/gpu": 8}
    )
    runtime = memory_runtime(inventory, memory)
    switch = Switch()
    switch.leading = False  # another replica leads when this one starts
    runtime.follow(switch)
    with caplog.at_level(logging.INFO, logger="coordinator.engine.loop"):
        async with runtime:
            await eventually(lambda: switch.waiting >= 1, what="the loop waiting to lead")
            assert _waits(caplog) == [
                "this replica does not lead yet: the test says so; it schedules once it leads"
            ]
            switch.set(True)
            memory.create_pod(pod("first", namespace="ml", gpus=1))
            await eventually(
                lambda: memory.pod("ml", "first")["spec"].get("nodeName"),  # type: ignore[index]
                what="a pod bound while it leads",
            )
            switch.set(False)  # the loop notices at its next cycle: a new pod wakes it
            memory.create_pod(pod("second", namespace="ml", gpus=1))
            await eventually(lambda: switch.waiting >= 1, what="the loop waiting again")
    assert _waits(caplog)[1:] == [
        "this replica lost the lead: the test says so; scheduling stopped until it leads"
    ]


def _waits(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the loop said each time it waited to lead."""
    said = (r.getMessage() for r in caplog.records if r.name == "coordinator.engine.loop")
    return [m for m in said if m.startswith("this replica")]
