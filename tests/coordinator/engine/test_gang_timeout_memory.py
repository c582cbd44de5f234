"""A gang whose timeout is written as docs/gangs.md shows it (``1h30m``) is scheduled end to end
on the in-memory cluster, with that timeout; a gang with a bad timeout is told which key is wrong.
(It once waited forever: the pod parser read only ``90s``/``5m``/``1h`` forms.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.core.gangs.identity import GangKey
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.inventory.store import Inventory
from tests.support.polling import eventually


def gang_pod(name: str, timeout: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "labels": {"topos.io/gang": "train", "topos.io/gang-min": "3"},
            "annotations": {"topos.io/gang-timeout": timeout},
        },
        "spec": {
            "schedulerName": "topos",
            "containers": [
                {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
            ],
        },
    }


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[MemoryCluster, GangRuntime]]:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = MemoryCluster(inventory)
    for name in ("h100-0", "h100-1"):
        cluster.add_node(name, topology=discover_profile("dgx-h100", hostname=name))
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05))
    async with runtime, gangs:
        yield cluster, gangs


def node_of(cluster: MemoryCluster, name: str) -> str | None:
    pod = cluster.pod("ml", name)
    assert pod is not None
    node: str | None = pod["spec"].get("nodeName")
    return node


async def test_a_gang_with_a_1h30m_timeout_is_scheduled(
    cluster: tuple[MemoryCluster, GangRuntime],
) -> None:
    memory, gangs = cluster
    for i in range(2):
        memory.create_pod(gang_pod(f"w{i}", "1h30m"))
    key = GangKey("ml", "train")
    status = await eventually(lambda: gangs.step.manager.status(key), what="the gang", timeout_s=30)
    assert status.timeout_s == 5400.0
    await gangs.runtime.settle()  # every member considered, nothing left to do
    assert [node_of(memory, f"w{i}") for i in range(2)] == [None, None]  # 2 of 3: all wait
    memory.create_pod(gang_pod("w2", "1h30m"))
    await eventually(
        lambda: all(node_of(memory, f"w{i}") for i in range(3)), what="all bound", timeout_s=30
    )


async def test_a_gang_with_a_bad_timeout_is_told_which_key_is_wrong(
    cluster: tuple[MemoryCluster, GangRuntime],
) -> None:
    memory, _ = cluster
    for i in range(3):
        memory.create_pod(gang_pod(f"w{i}", "-5m"))

    def failed() -> list[str]:
        return [
            e["message"] for e in memory.events("ml", "w0") if e["reason"] == "FailedScheduling"
        ]

    message = (await eventually(failed, what="FailedScheduling", timeout_s=30))[0]
    assert "metadata.annotations[topos.io/gang-timeout]" in message
    assert "'-5m'" in message
    assert node_of(memory, "w0") is None
