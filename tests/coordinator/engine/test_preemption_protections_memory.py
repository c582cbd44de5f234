"""Preemption's protections on the in-memory cluster, with the engine's clocks driven by the test:
a pending pod waits out its preemption delay and then preempts; a pod under its minimum runtime
is not preempted and the pending pod's message says so; the hourly eviction budget holds a second
preemption back; a minimum runtime that does not parse is reported (an Event naming key and
value on a running pod, a condition on a pending one) and harms nothing else."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.core.preemption.protections import DurationRule, Protections
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.ports import PodRef
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.polling import eventually


class Clock:
    """A clock the test moves: ``base`` plus what the test added."""

    def __init__(self, base: Callable[[], float]) -> None:
        self.base = base
        self.ahead = 0.0

    def __call__(self) -> float:
        return self.base() + self.ahead


class EvictingCluster(MemoryCluster):
    """Records evictions (the pod then goes, as after its grace period)."""

    def __init__(self, inventory: Inventory) -> None:
        super().__init__(inventory)
        self.evicted: list[str] = []

    async def evict(self, pod: PodRef) -> None:
        self.evicted.append(pod.key)
        self.delete_pod(pod.namespace, pod.name)


@dataclass
class Setup:
    cluster: EvictingCluster
    runtime: SchedulerRuntime
    clock: Clock  # the engine's (delay, budget)
    wall: Clock  # "now" against the pods' startTime (minimum runtime)


def make(protections: Protections) -> Callable[[], AsyncIterator[Setup]]:
    async def fixture() -> AsyncIterator[Setup]:
        inventory = Inventory(stale_ttl_s=3600)
        cluster = EvictingCluster(inventory)
        cluster.add_node("dgx-a", topology=discover_profile("dgx-h100", hostname="dgx-a"))
        runtime = memory_runtime(inventory, cluster)
        # The engine's clock stands still unless the test moves it; the wall clock runs, as the
        # pods' startTime (stamped at bind) does.
        clock, wall = Clock(lambda: 1000.0), Clock(time.time)
        gangs = GangRuntime(
            runtime,
            settings=GangSettings(tick_s=0.05, protections=protections),
            clock=clock,
            wall_clock=wall,
        )
        async with runtime, gangs:
            yield Setup(cluster, runtime, clock, wall)

    return fixture


delayed = pytest.fixture(make(Protections(preemption_delay=DurationRule(default_s=30.0))))
protected = pytest.fixture(
    make(Protections(min_runtime=DurationRule(priority_classes={"batch": 600.0})))
)
budgeted = pytest.fixture(make(Protections(evictions_per_hour=1)))


def node_of(cluster: MemoryCluster, name: str) -> str | None:
    obj = cluster.pod("default", name)
    return None if obj is None else obj["spec"].get("nodeName")


def message_of(cluster: MemoryCluster, name: str) -> str:
    obj = cluster.pod("default", name)
    assert obj is not None
    conditions = obj["status"].get("conditions") or [{}]
    return str(conditions[-1].get("message", ""))


async def fill(cluster: MemoryCluster, name: str = "filler", **kw: object) -> None:
    cluster.create_pod(pod(name, gpus=8, priority=0, **kw))  # type: ignore[arg-type]
    await eventually(lambda: node_of(cluster, name), what=f"{name} bound", timeout_s=10)


async def test_a_pending_pod_preempts_only_after_its_preemption_delay(delayed: Setup) -> None:
    cluster, runtime = delayed.cluster, delayed.runtime
    await fill(cluster)
    cluster.create_pod(pod("urgent", gpus=8, priority=100))
    await eventually(
        lambda: "preemption waits 30s more before evicting 1 pod" in message_of(cluster, "urgent"),
        what="the delay explained",
        timeout_s=10,
    )
    delayed.clock.ahead = 20.0
    runtime.scheduler.queue.cluster_changed()  # tried again before the delay is over
    await eventually(
        lambda: "preemption waits 10s more" in message_of(cluster, "urgent"),
        what="the rest of the delay explained",
        timeout_s=10,
    )
    assert cluster.evicted == []
    delayed.clock.ahead = 31.0  # the gang ticker sends it back by itself
    await eventually(lambda: node_of(cluster, "urgent"), what="urgent bound", timeout_s=15)
    assert cluster.evicted == ["default/filler"]


async def test_a_pod_no_eviction_would_help_says_nothing_of_a_delay(delayed: Setup) -> None:
    cluster, runtime = delayed.cluster, delayed.runtime
    await fill(cluster)
    # More CPU than the node has: evicting the lower-priority filler would not help.
    cluster.create_pod(pod("big", gpus=8, cpu="100000", priority=100))
    await eventually(
        lambda: "Insufficient cpu" in message_of(cluster, "big"),
        what="big explained",
        timeout_s=10,
    )
    await runtime.settle()
    assert "preemption" not in message_of(cluster, "big")


async def test_a_delay_of_its_own_overrides_the_configured_one(delayed: Setup) -> None:
    cluster = delayed.cluster
    await fill(cluster)
    cluster.create_pod(
        pod("urgent", gpus=8, priority=100, annotations={"topos.io/preemption-delay": "0"})
    )
    await eventually(lambda: node_of(cluster, "urgent"), what="urgent bound", timeout_s=15)
    assert cluster.evicted == ["default/filler"]


async def test_a_pod_under_its_minimum_runtime_is_not_preempted(protected: Setup) -> None:
    cluster, runtime = protected.cluster, protected.runtime
    await fill(cluster, spec={"priorityClassName": "batch"})
    cluster.create_pod(pod("urgent", gpus=8, priority=100))
    await eventually(
        lambda: "minimum runtime" in message_of(cluster, "urgent"),
        what="the protection explained",
        timeout_s=10,
    )
    message = message_of(cluster, "urgent")
    assert "only evicting pods under their minimum runtime would make room" in message
    assert "default/filler has run" in message
    assert "of its minimum runtime 10m" in message
    assert cluster.evicted == []
    protected.wall.ahead = 601.0  # ten minutes later it may go
    runtime.scheduler.queue.cluster_changed()
    await eventually(lambda: node_of(cluster, "urgent"), what="urgent bound", timeout_s=15)
    assert cluster.evicted == ["default/filler"]
    events = {e["reason"]: e["message"] for e in cluster.events(name="filler")}
    assert "Preempted by default/urgent (priority 100)" in events["Preempted"]
    assert "its priority 0 is lower" in events["Preempted"]
    preempting = [e for e in cluster.events(name="urgent") if e["reason"] == "Preempting"]
    assert "default/urgent preempts default/filler" in preempting[0]["message"]


async def test_the_eviction_budget_holds_back_the_next_preemption(budgeted: Setup) -> None:
    cluster = budgeted.cluster
    await fill(cluster)
    cluster.create_pod(pod("first", gpus=8, priority=100))
    await eventually(lambda: node_of(cluster, "first"), what="first bound", timeout_s=15)
    cluster.create_pod(pod("second", gpus=8, priority=200))
    await eventually(
        lambda: "eviction budget" in message_of(cluster, "second"),
        what="the budget explained",
        timeout_s=10,
    )
    assert "(1 of 1 evictions in the last hour)" in message_of(cluster, "second")
    assert cluster.evicted == ["default/filler"]
    budgeted.clock.ahead = 3601.0  # an hour on, the ticker sends it back
    await eventually(lambda: node_of(cluster, "second"), what="second bound", timeout_s=15)
    assert cluster.evicted == ["default/filler", "default/first"]


async def test_a_bad_minimum_runtime_is_reported_and_harms_nothing_else(
    protected: Setup,
) -> None:
    cluster = protected.cluster
    # Bound by another scheduler with an annotation that does not parse: an Event on it names
    # key and value, and the configured minimum (none for its class) applies.
    cluster.create_pod(
        pod("odd", gpus=8, priority=0, node="dgx-a", annotations={"topos.io/min-runtime": "soon"})
    )
    cluster.create_pod(
        pod("pending-odd", gpus=1, priority=100, annotations={"topos.io/min-runtime": "-5m"})
    )
    cluster.create_pod(pod("urgent", gpus=8, priority=100))
    await eventually(lambda: node_of(cluster, "urgent"), what="urgent bound", timeout_s=15)
    assert cluster.evicted == ["default/odd"]
    bad = [e for e in cluster.events(name="odd") if e["reason"] == "InvalidMinRuntime"]
    assert len(bad) == 1
    assert "metadata.annotations[topos.io/min-runtime]" in bad[0]["message"]
    assert "'soon'" in bad[0]["message"]
    # A pending pod with a bad value is refused for it, naming key and value.
    message = message_of(cluster, "pending-odd")
    assert "topos.io/min-runtime" in message
    assert "'-5m'" in message
    assert node_of(cluster, "pending-odd") is None


async def test_a_gang_waits_out_its_longest_members_delay_and_preempts_in_one_decision(
    delayed: Setup,
) -> None:
    cluster = delayed.cluster
    cluster.add_node("dgx-b", topology=discover_profile("dgx-h100", hostname="dgx-b"))
    await fill(cluster, "filler-a")
    await fill(cluster, "filler-b")
    slow = {"topos.io/preemption-delay": "1m"}
    cluster.create_pod(pod("train-0", gpus=8, priority=100, gang=("train", 2)))
    cluster.create_pod(pod("train-1", gpus=8, priority=100, gang=("train", 2), annotations=slow))
    await eventually(
        lambda: "preemption waits 1m more" in message_of(cluster, "train-0"),
        what="the gang's delay explained",
        timeout_s=10,
    )
    delayed.clock.ahead = 31.0  # past the configured 30 s, not past train-1's minute
    delayed.runtime.scheduler.queue.cluster_changed()
    await eventually(
        lambda: "preemption waits 29s more" in message_of(cluster, "train-0"),
        what="the rest of the gang's delay",
        timeout_s=10,
    )
    assert cluster.evicted == []
    delayed.clock.ahead = 61.0
    await eventually(lambda: node_of(cluster, "train-1"), what="the gang bound", timeout_s=15)
    assert sorted(cluster.evicted) == ["default/filler-a", "default/filler-b"]
    preempting = [
        e
        for m in ("train-0", "train-1")
        for e in cluster.events(name=m)
        if e["reason"] == "Preempting"
    ]
    assert len(preempting) == 2
    assert preempting[0]["message"] == preempting[1]["message"]  # one decision for both
    assert "gang:default/train preempts" in preempting[0]["message"]
