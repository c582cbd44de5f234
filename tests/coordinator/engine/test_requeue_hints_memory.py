"""A pod waiting for room is tried again when room may have come (a pod on a node ended), not
when a pod already bound only changed (started, relabelled) — kube-scheduler's queueing hints:
waking it for nothing costs a cycle, a FailedScheduling Event and a status write, and doubles
its backoff. On the in-memory cluster, the queue's clock driven by hand."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.core.framework.results import Failure
from coordinator.engine.loop import RuntimeSettings, Scheduler
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.clock import ManualClock
from tests.support.polling import eventually

Running = tuple[MemoryCluster, Scheduler, ManualClock]


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    clock = ManualClock()
    inventory = Inventory(stale_ttl_s=3600, clock=clock)
    cluster = MemoryCluster(inventory)
    cluster.add_node("n1", allocatable={"cpu": "4", "memory": "8Gi"})
    runtime = memory_runtime(inventory, cluster, clock=clock, settings=RuntimeSettings())
    async with runtime:
        yield cluster, runtime.scheduler, clock


def bound(cluster: MemoryCluster, name: str) -> bool:
    obj = cluster.pod("default", name)
    return obj is not None and bool(obj["spec"].get("nodeName"))


async def test_a_waiting_pod_is_retried_when_room_frees_not_when_a_bound_pod_changes(
    running: Running,
) -> None:
    cluster, scheduler, clock = running
    cluster.create_pod(pod("a", cpu="3", memory=None))
    await eventually(lambda: bound(cluster, "a"), what="a bound")
    cluster.create_pod(pod("b", cpu="2", memory=None))
    first = await eventually(lambda: scheduler.last_attempt("default/b"), what="b tried")
    assert isinstance(first.result, Failure)
    assert not bound(cluster, "b")

    # a is relabelled (as a pod starting, or its labels edited): b's room is as it was.
    cluster.update_pod_metadata("default", "a", labels={"phase": "started"})
    clock.now += 5  # past b's backoff: had it been sent back, it would be tried next
    cluster.create_pod(pod("c", cpu="500m", memory=None))  # wakes the loop; older b goes first
    await eventually(lambda: bound(cluster, "c"), what="c bound")
    assert scheduler.last_attempt("default/b") is first  # not tried again

    # a ends: room for b.
    cluster.delete_pod("default", "a")
    clock.now += 5
    await eventually(lambda: bound(cluster, "b"), what="b bound once a is gone")
