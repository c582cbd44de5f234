"""Topos's preemption leaves pods Kueue admitted alone: Kueue evicts workloads (to reclaim quota,
for a higher-priority workload), Topos never picks their pods as victims, and a higher-priority
pod waits instead. A Kueue-admitted pod still preempts a lower-priority pod Kueue does not
manage (in-memory cluster; evictions recorded, not carried out)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.ports import PodRef
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.polling import eventually

KUEUE_JOB_POD = {"kueue.x-k8s.io/podset": "main"}  # Kueue writes it when it starts the Job
KUEUE_PLAIN_POD = {"kueue.x-k8s.io/managed": "true", "kueue.x-k8s.io/queue-name": "team-a"}


class Evictions(MemoryCluster):
    def __init__(self, inventory: Inventory) -> None:
        super().__init__(inventory)
        self.evicted: list[str] = []

    async def evict(self, pod: PodRef) -> None:
        self.evicted.append(pod.key)


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[Evictions, SchedulerRuntime]]:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = Evictions(inventory)
    cluster.add_node("dgx-a", topology=discover_profile("dgx-h100", hostname="dgx-a"))
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05))
    async with runtime, gangs:
        yield cluster, runtime


def node_of(cluster: MemoryCluster, name: str) -> str | None:
    obj = cluster.pod("default", name)
    assert obj is not None
    node: str | None = obj["spec"].get("nodeName")
    return node


@pytest.mark.parametrize("labels", [KUEUE_JOB_POD, KUEUE_PLAIN_POD], ids=["job", "plain-pod"])
async def test_a_kueue_admitted_pod_is_never_a_victim(
    cluster: tuple[Evictions, SchedulerRuntime], labels: dict[str, str]
) -> None:
    memory, runtime = cluster
    memory.create_pod(pod("admitted", gpus=6, priority=0, labels=labels))
    await eventually(lambda: node_of(memory, "admitted"), what="admitted bound", timeout_s=10)
    memory.create_pod(pod("urgent", gpus=8, priority=100))
    await runtime.settle()
    await runtime.settle()
    assert memory.evicted == []
    assert node_of(memory, "urgent") is None
    assert node_of(memory, "admitted") == "dgx-a"


async def test_the_same_pod_without_kueues_label_is_preempted(
    cluster: tuple[Evictions, SchedulerRuntime],
) -> None:
    memory, _ = cluster
    memory.create_pod(pod("filler", gpus=6, priority=0, labels={"app": "x"}))
    await eventually(lambda: node_of(memory, "filler"), what="filler bound", timeout_s=10)
    memory.create_pod(pod("urgent", gpus=8, priority=100))
    await eventually(lambda: memory.evicted, what="the eviction", timeout_s=10)
    assert memory.evicted == ["default/filler"]


async def test_a_kueue_admitted_pod_preempts_a_lower_pod_kueue_does_not_manage(
    cluster: tuple[Evictions, SchedulerRuntime],
) -> None:
    memory, _ = cluster
    memory.create_pod(pod("filler", gpus=6, priority=0))
    await eventually(lambda: node_of(memory, "filler"), what="filler bound", timeout_s=10)
    memory.create_pod(pod("admitted", gpus=8, priority=100, labels=KUEUE_JOB_POD))
    await eventually(lambda: memory.evicted, what="the eviction", timeout_s=10)
    assert memory.evicted == ["default/filler"]
