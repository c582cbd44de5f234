"""Host ports held by pods already running: the running scheduler (in-memory runtime) must treat
a bound pod's ``hostPort`` as taken on its node, whoever placed that pod, with kube-scheduler's
message for the pod that wants it too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory

PORTS_TAKEN = (
    "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
)


def port_pod(name: str, port: int, *, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler" if node else "topos",
        "containers": [
            {
                "name": "web",
                "image": "busybox",
                "ports": [{"containerPort": 80, "hostPort": port}],
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            }
        ],
    }
    if node:
        spec["nodeName"] = node  # placed by another scheduler (or by hand)
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


@pytest.fixture
async def one_node() -> AsyncIterator[tuple[MemoryCluster, SchedulerRuntime]]:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = MemoryCluster(inventory)
    cluster.add_node("only", topology=discover_profile("dgx-h100", hostname="only"))
    runtime = memory_runtime(inventory, cluster)
    async with runtime:
        yield cluster, runtime


def node_of(cluster: MemoryCluster, name: str) -> str | None:
    pod = cluster.pod("default", name)
    assert pod is not None
    return pod["spec"].get("nodeName")


def failures(cluster: MemoryCluster, name: str) -> list[str]:
    return [
        e["message"] for e in cluster.events("default", name) if e["reason"] == "FailedScheduling"
    ]


async def test_a_bound_pods_host_port_is_taken_and_another_port_is_free(
    one_node: tuple[MemoryCluster, SchedulerRuntime],
) -> None:
    cluster, runtime = one_node
    cluster.create_pod(port_pod("running", 8080, node="only"))
    cluster.create_pod(port_pod("same-port", 8080))
    await runtime.settle()
    assert node_of(cluster, "same-port") is None
    assert failures(cluster, "same-port") == [PORTS_TAKEN]

    cluster.create_pod(port_pod("other-port", 8081))
    await runtime.settle()
    assert node_of(cluster, "other-port") == "only"


async def test_a_port_held_by_a_pod_topos_placed_stays_taken_once_its_bind_is_seen(
    one_node: tuple[MemoryCluster, SchedulerRuntime],
) -> None:
    cluster, runtime = one_node
    cluster.create_pod(port_pod("first", 8080))
    await runtime.settle()
    assert node_of(cluster, "first") == "only"
    # The inventory now shows "first" bound: the assumption is gone, the pod's port is not.
    cluster.create_pod(port_pod("second", 8080))
    await runtime.settle()
    assert node_of(cluster, "second") is None
    assert failures(cluster, "second") == [PORTS_TAKEN]
