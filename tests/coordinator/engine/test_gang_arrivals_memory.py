"""Members of a gang still short of members are not told why they wait while their siblings are
still arriving (docs/gangs.md, "What happens to a gang member"): each is told once, the usual
words, when no new member has joined for 2 s, or 30 s after the gang was first seen. A gang that
completes meanwhile writes no ``FailedScheduling`` at all; the gang's own status has the live
count at once. On the in-memory cluster, with the gang runtime on a simulated clock whose tick
the tests drive."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.core.gangs.identity import GangKey
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from tests.support.polling import eventually

KEY = GangKey("ml", "train")


def member(name: str, size: int, gang: str = "train") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}-{next(_UIDS)}",
            "labels": {"topos.io/gang": gang, "topos.io/gang-min": str(size)},
        },
        "spec": {
            "schedulerName": "topos",
            "containers": [
                {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
        "status": {},
    }


_UIDS = iter(range(10**9))


class Clock:
    """The gang runtime's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def memory_cluster() -> MemoryCluster:
    memory = MemoryCluster(Inventory(stale_ttl_s=3600))
    for name in ("h100-0", "h100-1", "h100-2", "h100-3"):  # 32 GPUs
        memory.add_node(name, topology=discover_profile("dgx-h100", hostname=name))
    return memory


@contextlib.asynccontextmanager
async def coordinator(
    memory: MemoryCluster, clock: Clock
) -> AsyncIterator[tuple[SchedulerRuntime, GangRuntime]]:
    runtime = memory_runtime(memory.inventory, memory)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05), clock=clock)
    async with runtime, gangs:
        await runtime.started.wait()
        yield runtime, gangs


async def at(clock: Clock, now: float, runtime: SchedulerRuntime, gangs: GangRuntime) -> None:
    """The clock at ``now`` (seconds after the start), every pod tried, a tick, its writes."""
    clock.now = 1000.0 + now
    await runtime.settle()
    gangs.step.tick()
    await runtime.scheduler.drain()


def told(memory: MemoryCluster, name: str) -> list[str]:
    """The ``FailedScheduling`` Events about ``name``, counts included (one Event told twice
    reads twice)."""
    return [
        e["message"]
        for e in memory.events("ml", name)
        if e["reason"] == "FailedScheduling"
        for _ in range(e.get("count") or 1)
    ]


def scheduled(memory: MemoryCluster, name: str) -> tuple[str, str] | None:
    pod = memory.pod("ml", name)
    assert pod is not None
    for c in pod["status"].get("conditions") or ():
        if c["type"] == "PodScheduled":
            return c["status"], c.get("message", "")
    return None


def node_of(memory: MemoryCluster, name: str) -> str | None:
    pod = memory.pod("ml", name)
    assert pod is not None
    node: str | None = pod["spec"].get("nodeName")
    return node


WAITING = "waiting for pod group train: 0/3 members placed (waiting for all 3 pods to exist)"


async def test_a_gang_left_short_is_told_once_no_member_has_joined_for_2s() -> None:
    memory, clock = memory_cluster(), Clock()
    async with coordinator(memory, clock) as (runtime, gangs):
        memory.create_pod(member("w0", 3))
        await at(clock, 0.0, runtime, gangs)
        memory.create_pod(member("w1", 3))
        await at(clock, 1.0, runtime, gangs)
        status = gangs.step.manager.status(KEY)
        assert status is not None
        assert (status.phase, status.members) == ("Pending", 2)  # the live count, at once
        assert "(2 of 3 pods exist)" in status.message
        await at(clock, 2.9, runtime, gangs)  # w1 joined 1.9 s ago
        assert [told(memory, n) for n in ("w0", "w1")] == [[], []]
        assert [scheduled(memory, n) for n in ("w0", "w1")] == [None, None]
        await at(clock, 3.0, runtime, gangs)
        assert [told(memory, n) for n in ("w0", "w1")] == [[WAITING], [WAITING]]
        assert scheduled(memory, "w0") == ("False", WAITING)
        await at(clock, 10.0, runtime, gangs)  # told once, not at every tick
        assert [told(memory, n) for n in ("w0", "w1")] == [[WAITING], [WAITING]]
        memory.create_pod(member("w2", 3))
        await eventually(
            lambda: all(node_of(memory, f"w{i}") for i in range(3)), what="all bound", timeout_s=30
        )
        await runtime.scheduler.drain()
        assert [len(told(memory, f"w{i}")) for i in range(3)] == [1, 1, 0]


async def test_a_gang_whose_members_keep_arriving_writes_no_failed_scheduling() -> None:
    """Members 1.5 s apart, 3 s from the first to the last: never told, all bound."""
    memory, clock = memory_cluster(), Clock()
    async with coordinator(memory, clock) as (runtime, gangs):
        for i, now in enumerate((0.0, 1.5, 3.0)):
            memory.create_pod(member(f"w{i}", 3))
            await at(clock, now, runtime, gangs)
        await eventually(
            lambda: all(node_of(memory, f"w{i}") for i in range(3)), what="all bound", timeout_s=30
        )
        await at(clock, 10.0, runtime, gangs)
        assert [told(memory, f"w{i}") for i in range(3)] == [[], [], []]
        assert [scheduled(memory, f"w{i}") for i in range(3)] == [("True", "")] * 3


async def test_members_trickling_in_are_told_30s_after_the_gang_was_first_seen() -> None:
    memory, clock = memory_cluster(), Clock()
    size = 30
    async with coordinator(memory, clock) as (runtime, gangs):
        now = 0.0
        for i in range(20):  # one every 1.5 s: 0 … 28.5 s, never quiet for 2 s
            memory.create_pod(member(f"w{i}", size))
            await at(clock, now, runtime, gangs)
            now += 1.5
        await at(clock, 29.9, runtime, gangs)
        assert [told(memory, f"w{i}") for i in range(20)] == [[]] * 20
        await at(clock, 30.0, runtime, gangs)
        words = f"waiting for pod group train: 0/{size} members placed (waiting for all {size}"
        assert all(told(memory, f"w{i}") == [f"{words} pods to exist)"] for i in range(20))
        memory.create_pod(member("w20", size))  # past 30 s: a new member is told at once
        await at(clock, 30.1, runtime, gangs)
        assert told(memory, "w20") == [f"{words} pods to exist)"]


async def test_a_member_re_created_is_told_only_after_its_own_grace() -> None:
    memory, clock = memory_cluster(), Clock()
    async with coordinator(memory, clock) as (runtime, gangs):
        memory.create_pod(member("w0", 3))
        memory.create_pod(member("w1", 3))
        await at(clock, 0.0, runtime, gangs)
        await at(clock, 2.0, runtime, gangs)
        assert told(memory, "w1") == [WAITING]
        memory.delete_pod("ml", "w1")
        memory.create_pod(member("w1", 3))  # a new pod under the name: a new member
        await at(clock, 3.0, runtime, gangs)
        assert told(memory, "w1") == [WAITING]  # the first pod's Event: nothing new
        assert scheduled(memory, "w1") is None  # the new pod is not told yet
        await at(clock, 5.0, runtime, gangs)
        assert told(memory, "w1") == [WAITING, WAITING]
        assert scheduled(memory, "w1") == ("False", WAITING)


async def test_a_re_run_under_the_same_name_gets_a_grace_of_its_own() -> None:
    memory, clock = memory_cluster(), Clock()
    async with coordinator(memory, clock) as (runtime, gangs):
        for i in range(2):
            memory.create_pod(member(f"w{i}", 3))
        await at(clock, 0.0, runtime, gangs)
        await at(clock, 2.0, runtime, gangs)
        assert told(memory, "w0") == [WAITING]
        for i in range(2):
            memory.delete_pod("ml", f"w{i}")
        await at(clock, 3.0, runtime, gangs)
        assert gangs.step.manager.status(KEY) is None  # the run is over
        for i in range(2):
            memory.create_pod(member(f"w{i}", 3))
        await at(clock, 3.5, runtime, gangs)
        await at(clock, 5.4, runtime, gangs)
        assert [scheduled(memory, f"w{i}") for i in range(2)] == [None, None]
        await at(clock, 5.5, runtime, gangs)
        assert [scheduled(memory, f"w{i}") for i in range(2)] == [("False", WAITING)] * 2


async def test_a_coordinator_restarted_while_members_arrive_tells_them_after_a_grace() -> None:
    """A new leader counts the members it finds pending as joined when it started: told 2 s
    after its start, and the gang binds when its last member comes."""
    memory, clock = memory_cluster(), Clock()
    async with coordinator(memory, clock) as (runtime, gangs):
        for i in range(2):
            memory.create_pod(member(f"w{i}", 3))
        await at(clock, 0.0, runtime, gangs)
        await at(clock, 1.5, runtime, gangs)
    assert [scheduled(memory, f"w{i}") for i in range(2)] == [None, None]
    async with coordinator(memory, clock) as (runtime, gangs):  # started at 1.5 s
        await at(clock, 3.0, runtime, gangs)
        status = gangs.step.manager.status(KEY)
        assert status is not None
        assert status.members == 2
        assert [scheduled(memory, f"w{i}") for i in range(2)] == [None, None]
        await at(clock, 3.5, runtime, gangs)
        assert [told(memory, f"w{i}") for i in range(2)] == [[WAITING]] * 2
        memory.create_pod(member("w2", 3))
        await eventually(
            lambda: all(node_of(memory, f"w{i}") for i in range(3)), what="all bound", timeout_s=30
        )


async def test_a_parked_member_is_not_parked_again_at_each_sibling_arrival() -> None:
    """20 of a gang of 30 arrive in one burst: each parked member counts one attempt (its backoff
    the first one's), not one more at every sibling's arrival."""
    memory, clock = memory_cluster(), Clock()
    async with coordinator(memory, clock) as (runtime, gangs):
        for i in range(20):
            memory.create_pod(member(f"w{i}", 30))
            await at(clock, 0.01 * i, runtime, gangs)
        queue = runtime.scheduler.queue
        entries = [queue.named(f"ml/w{i}") for i in range(20)]
        assert all(e is not None and e.where == "unschedulable" for e in entries)
        assert [e.attempts for e in entries if e is not None] == [1] * 20
        await at(clock, 2.5, runtime, gangs)  # told once the burst stopped; still one attempt
        assert all(len(told(memory, f"w{i}")) == 1 for i in range(20))
        assert [e.attempts for e in entries if e is not None] == [1] * 20
