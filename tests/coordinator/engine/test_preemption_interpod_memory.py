"""Preemption re-checks a pod's topology spread and inter-pod anti-affinity with its victims gone,
as kube-scheduler's DefaultPreemption does: victims are chosen so that the pod passes every filter
on its node, not only so that it has room (in-memory cluster; evictions recorded, not carried
out). The first case is upstream's e2e "PodTopologySpread Preemption validates proper pods are
preempted". A pod over a node's CSI volume limit evicts a pod that holds a volume there."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.ports import PodRef
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.polling import eventually
from tests.support.volumes import csi_node, csi_volume

DOMAIN = "example.com/domain"
SPREAD_LABEL = "e2e-pts-preemption"


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
    for name in ("a", "b"):
        cluster.add_node(
            name,
            labels={DOMAIN: name},
            allocatable={"cpu": "10", "memory": "64Gi", "pods": 110},
        )
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05))  # preemption is its part
    async with runtime, gangs:
        yield cluster, runtime


def running(name: str, node: str, cpu: int, priority: int, **kw: Any) -> dict[str, Any]:
    return pod(name, cpu=str(cpu), memory="1Gi", node=node, priority=priority, **kw)


async def test_spread_preemptor_evicts_as_many_as_its_skew_needs(
    cluster: tuple[Evictions, SchedulerRuntime],
) -> None:
    memory, runtime = cluster
    labels = {SPREAD_LABEL: ""}
    memory.create_pod(running("high", "a", 9, 1000, labels=labels))
    for i in (1, 2, 3):
        memory.create_pod(running(f"low-{i}", "b", 3, 0, labels=labels))
    spread = {
        "maxSkew": 1,
        "topologyKey": DOMAIN,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchExpressions": [{"key": SPREAD_LABEL, "operator": "Exists"}]},
    }
    memory.create_pod(
        pod(
            "medium",
            cpu="3",
            priority=500,
            labels=labels,
            spec={"topologySpreadConstraints": [spread]},
        )
    )
    await eventually(lambda: memory.evicted, what="the evictions", timeout_s=10)
    await runtime.settle()
    # One low pod would give it room on b, but b would then hold 3 matching pods to a's 1
    # (skew 2 > maxSkew 1): two must go, and only low ones.
    assert len(memory.evicted) == 2, memory.evicted
    assert set(memory.evicted) <= {"default/low-1", "default/low-2", "default/low-3"}


async def test_anti_affinity_preemptor_evicts_the_pod_it_cannot_sit_beside(
    cluster: tuple[Evictions, SchedulerRuntime],
) -> None:
    memory, runtime = cluster
    memory.create_pod(running("high", "a", 9, 1000))
    memory.create_pod(running("web", "b", 1, 0, labels={"app": "web"}))
    memory.create_pod(running("batch", "b", 5, 0))
    away_from_web = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "web"}},
                    "topologyKey": DOMAIN,
                }
            ]
        }
    }
    memory.create_pod(pod("api", cpu="4", priority=500, affinity=away_from_web))
    await eventually(lambda: memory.evicted, what="the eviction", timeout_s=10)
    await runtime.settle()
    # b has room for it (4 of 10 cpu free) but holds the pod its anti-affinity refuses: that one
    # goes; the larger batch pod stays, as evicting it would not help.
    assert memory.evicted == ["default/web"]


async def test_a_spread_preemptor_evicts_nobody_when_no_node_can_be_made_to_fit(
    cluster: tuple[Evictions, SchedulerRuntime],
) -> None:
    memory, runtime = cluster
    labels = {SPREAD_LABEL: ""}
    # a: full of high pods. b: a matching high pod, and a low one evicting which would make
    # room; but with minDomains 3 over 2 domains the global minimum is 0, and b would hold 2
    # matching pods (skew 2 > maxSkew 1) whatever is evicted.
    memory.create_pod(running("high-1", "a", 5, 1000, labels=labels))
    memory.create_pod(running("high-2", "a", 5, 1000, labels=labels))
    memory.create_pod(running("high-3", "b", 1, 1000, labels=labels))
    memory.create_pod(running("low", "b", 9, 0))
    spread = {
        "maxSkew": 1,
        "topologyKey": DOMAIN,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchExpressions": [{"key": SPREAD_LABEL, "operator": "Exists"}]},
        "minDomains": 3,
    }
    memory.create_pod(
        pod(
            "medium",
            cpu="3",
            priority=500,
            labels=labels,
            spec={"topologySpreadConstraints": [spread]},
        )
    )
    await runtime.settle()
    await runtime.settle()
    assert memory.evicted == []


@pytest.mark.parametrize(
    "volume",
    [
        {"persistentVolumeClaim": {"claimName": "new"}},
        {"awsElasticBlockStore": {"volumeID": "vol-new"}},  # inline, counted as EBS CSI
    ],
)
async def test_a_preemptor_over_the_volume_limit_evicts_a_pod_that_holds_a_volume(
    cluster: tuple[Evictions, SchedulerRuntime], volume: dict[str, Any]
) -> None:
    memory, runtime = cluster
    for name in ("a1", "b1", "new"):
        for obj in csi_volume(name):
            memory.volumes.apply(obj)
    for node in ("a", "b"):
        memory.volumes.apply(csi_node(node, ebs=1))
    memory.create_pod(running("high", "a", 1, 1000, spec={"volumes": claim_volume("a1")}))
    memory.create_pod(running("bystander", "b", 1, 0))
    memory.create_pod(running("holder", "b", 1, 0, spec={"volumes": claim_volume("b1")}))
    memory.create_pod(pod("p", cpu="1", priority=500, spec={"volumes": [{"name": "d", **volume}]}))
    await eventually(lambda: memory.evicted, what="the eviction", timeout_s=10)
    await runtime.settle()
    # both nodes have room, neither a volume to spare: the low pod holding b's volume goes, the
    # one without volumes stays (evicting it would free none)
    assert memory.evicted == ["default/holder"]


def claim_volume(name: str) -> list[dict[str, Any]]:
    return [{"name": "data", "persistentVolumeClaim": {"claimName": name}}]


async def test_a_lower_priority_pod_arriving_after_a_failed_attempt_can_be_preempted(
    cluster: tuple[Evictions, SchedulerRuntime],
) -> None:
    # The lowest running priority is read once per cluster change: a pod that found no one to
    # preempt finds the lower-priority pod bound since.
    memory, runtime = cluster
    for node in ("a", "b"):
        memory.create_pod(running(f"peer-{node}", node, 8, 1000))
    memory.create_pod(pod("urgent", cpu="6", memory="1Gi", priority=1000))
    await eventually(lambda: runtime.scheduler.last_attempt("default/urgent"), what="tried")
    await runtime.settle()
    assert memory.evicted == []  # only equals running: nothing to preempt
    memory.delete_pod("default", "peer-a")
    memory.create_pod(running("batch", "a", 8, 0))  # takes the room before urgent does
    await eventually(lambda: memory.evicted, what="the eviction", timeout_s=10)
    assert memory.evicted == ["default/batch"]
