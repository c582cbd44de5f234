"""Kueue not installed (the shared control plane has no Kueue CRDs): the placement admission
check's controller says once that it is idle and stops; the scheduler it sits beside is not
touched."""

from __future__ import annotations

import logging

import pytest

from agent.devices import discover_profile
from common.kube import KubeClient
from coordinator.adapters.kube.admissioncheck import IDLE, PlacementCheckController
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.polling import eventually


async def test_without_kueue_the_check_is_idle_says_so_once_and_scheduling_goes_on(
    kube: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = MemoryCluster(inventory)
    cluster.add_node("dgx-a", topology=discover_profile("dgx-h100", hostname="dgx-a"))
    runtime = memory_runtime(inventory, cluster)
    async with runtime:
        controller = PlacementCheckController(kube, runtime.scheduler, lambda: None)
        with caplog.at_level(logging.WARNING, logger="coordinator.adapters.kube.admissioncheck"):
            await controller.run()  # returns: nothing to answer
        assert controller.idle == IDLE
        assert [r.getMessage() for r in caplog.records] == [IDLE]
        assert controller.rounds == 0
        cluster.create_pod(pod("still-placed", gpus=1))
        await eventually(
            lambda: (cluster.pod("default", "still-placed") or {})["spec"].get("nodeName"),
            what="the pod bound",
            timeout_s=10,
        )
