"""Preemption for DRA claims in the scheduling loop, over the in-memory cluster: a claim pod of
high priority evicts the low-priority pod whose claim holds every GPU, then waits — without
evicting anyone else — until the victim's claim is released (kube-controller-manager's part,
played late here), and is then bound on those GPUs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from tests.coordinator.engine.test_nominations_memory import LingeringCluster, message_of, node_of
from tests.support.dra import claim, claim_pod, gpu_class, memory_dra_node
from tests.support.polling import eventually


class SlowController(LingeringCluster):
    """Claims of deleted pods are released only when the test says so."""

    def __init__(self, inventory: Inventory) -> None:
        super().__init__(inventory)
        self.gone: list[str] = []
        self.release_now = self.dra.unreserve
        self.dra.unreserve = self.gone.append  # type: ignore[method-assign]

    def release(self) -> None:
        for uid in self.gone:
            self.release_now(uid)
        self.gone.clear()


def claim_pod_at(name: str, claim_name: str, priority: int) -> dict[str, Any]:
    obj = claim_pod(name, claim_name=claim_name, scheduler="topos", namespace="default")
    obj["spec"]["priority"] = priority
    return obj


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[SlowController, SchedulerRuntime]]:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = SlowController(inventory)
    memory_dra_node(cluster, "dgx-a", "dgx1-v100")
    cluster.dra.put("DeviceClass", gpu_class())
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05), nominate=cluster.nominate)
    async with runtime, gangs:
        yield cluster, runtime


async def test_the_preemptor_waits_for_the_victims_claim_then_takes_its_gpus(
    cluster: tuple[SlowController, SchedulerRuntime],
) -> None:
    memory, runtime = cluster
    memory.dra.put("ResourceClaim", claim("held", 8, namespace="default"))
    memory.create_pod(claim_pod_at("victim", "held", 0))
    await eventually(lambda: node_of(memory, "victim"), what="victim bound", timeout_s=10)
    memory.dra.put("ResourceClaim", claim("wanted", 4, namespace="default"))
    memory.create_pod(claim_pod_at("urgent", "wanted", 100))
    await eventually(lambda: memory.evicted == ["default/victim"], what="the eviction")

    memory.terminate()  # the victim is gone; its claim is still allocated to it
    runtime.scheduler.queue.cluster_changed(lambda p: True)  # urgent is tried meanwhile
    await runtime.settle()
    assert node_of(memory, "urgent") is None
    assert "waiting for 1 ResourceClaim(s) of preempted pods to be released: default/held" in (
        message_of(memory, "urgent")
    )
    # The room stays nominated for urgent, and nobody else is evicted meanwhile.
    urgent = memory.pod("default", "urgent")
    assert urgent is not None
    assert urgent["status"].get("nominatedNodeName") == "dgx-a"
    assert memory.evicted == []

    memory.release()  # kube-controller-manager unreserves and deallocates the claim
    await eventually(lambda: node_of(memory, "urgent"), what="urgent bound", timeout_s=10)
    assert node_of(memory, "urgent") == "dgx-a"
    wanted = memory.dra.get("ResourceClaim", "default/wanted")
    assert wanted is not None
    assert len(wanted["status"]["allocation"]["devices"]["results"]) == 4
