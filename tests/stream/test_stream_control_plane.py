"""The capacity stream and inventory on the real control plane: simulated nodes registered as
Node objects (devcluster.nodes), agents' stream clients on the fake NVML of two profiles, and a
coordinator on loopback that merges their reports with the Nodes and every bound pod."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from common.kube import PODS, KubeClient
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from coordinator.inventory.store import Inventory
from devcluster.nodes import SimNode, plan_nodes, register
from tests.support.clock import ManualClock
from tests.support.inventory_wait import until
from tests.support.sim_agent import SimAgent

pytestmark = pytest.mark.kube


@pytest.fixture
def inv() -> Inventory:
    return Inventory(stale_ttl_s=30, clock=ManualClock())


@pytest.fixture
async def nodes(kube: KubeClient, unique_name: Callable[[str], str]) -> list[SimNode]:
    """One DGX A100 and one 8-GPU PCIe box, registered as Ready Nodes with unique names."""
    planned = plan_nodes([("dgx-a100", 1), ("pcie-8x", 1)])
    renamed = [
        SimNode(
            name=unique_name(n.name),
            profile=n.profile,
            leaf=n.leaf,
            spine=n.spine,
            topology=n.topology,
        )
        for n in planned
    ]
    await register(kube, renamed)
    return renamed


@pytest.fixture
async def coordinator(kubeconfig: Any, inv: Inventory, nodes: list[SimNode]) -> AsyncIterator[str]:
    config = parse_config(
        {
            "coordinator": {"sweepIntervalSeconds": 3600},
            "auth": {"enabled": False},
            # about the stream and the inventory, not scheduling: no scheduler on the shared plane
            "scheduler": {"enabled": False},
        }
    )
    async with running(wire(config, KubeBackend(str(kubeconfig)), inventory=inv)) as url:
        await until(inv, lambda: all(n.name in inv for n in nodes))  # the API server's Nodes
        yield url


async def _node(url: str, name: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/v1/nodes/{name}") as resp:
        assert resp.status == 200, await resp.text()
        body: dict[str, Any] = await resp.json()
        return body


async def test_agents_of_two_profiles_merge_with_their_node_objects(
    coordinator: str, inv: Inventory, nodes: list[SimNode]
) -> None:
    agents = [SimAgent(coordinator, n) for n in nodes]
    for agent in agents:
        await agent.start()
    dgx, pcie = [await _node(coordinator, n.name) for n in nodes]
    assert dgx["ready"] is True
    assert dgx["labels"]["topos.io/leaf"] == "leaf-0"
    assert dgx["allocatable"]["nvidia.com/gpu"] == 8
    assert dgx["topology"]["nvswitch"] is True
    assert dgx["connected"] is True
    assert pcie["topology"]["links"][0][7] == "SYS"  # two sockets
    assert pcie["free"]["nvidia.com/gpu"] == 8
    assert pcie["free"]["cpu"] == pcie["allocatable"]["cpu"]
    for agent in agents:
        await agent.stop()


async def test_mig_layout_change_in_the_fake_follows_into_the_inventory(
    coordinator: str, inv: Inventory, nodes: list[SimNode]
) -> None:
    node = nodes[0]  # DGX A100: MIG-capable, MIG off
    agent = SimAgent(coordinator, node)
    await agent.start()
    nvml = agent.source.nvml
    nvml.nvmlInit()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(2)
        nvml.nvmlDeviceSetMigMode(handle, nvml.NVML_DEVICE_MIG_ENABLE)
        info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(
            handle, nvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE
        )
        gi = nvml.nvmlDeviceCreateGpuInstance(handle, info.id)
        ci_info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi,
            nvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
            nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
        )
        nvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
    finally:
        nvml.nvmlShutdown()
    agent.client.publish(agent.source.discover())

    def gpu2_instances() -> int:
        state = inv.node(node.name)
        assert state is not None
        assert state.topology is not None
        return len(state.topology.gpus[2].mig_instances)

    await until(inv, lambda: gpu2_instances() == 1)
    body = await _node(coordinator, node.name)
    gpu2 = body["topology"]["gpus"][2]
    assert gpu2["mig_enabled"] is True
    assert gpu2["mig_instances"][0]["profile"] == "3g.20gb"
    assert agent.client.stats.hellos == 1  # a delta carried it, not a new hello
    await agent.stop()


async def test_pods_bound_by_another_scheduler_reduce_free_capacity(
    coordinator: str, inv: Inventory, kube: KubeClient, namespace: str, nodes: list[SimNode]
) -> None:
    node = nodes[1]
    agent = SimAgent(coordinator, node)
    await agent.start()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "other-scheduler-job"},
        "spec": {
            "nodeName": node.name,  # bound directly, as another scheduler would
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/job:1",
                    "resources": {
                        "requests": {"cpu": "3", "memory": "8Gi"},
                        "limits": {"nvidia.com/gpu": "3"},
                    },
                }
            ],
        },
    }
    created = await kube.create(PODS, pod, namespace=namespace)
    await until(inv, lambda: inv.node(node.name).free["nvidia.com/gpu"] == 5)  # type: ignore[union-attr]
    body = await _node(coordinator, node.name)
    assert body["free"]["nvidia.com/gpu"] == 5
    assert body["requested"]["cpu"] == 3000
    assert [(p["name"], p["scheduler"]) for p in body["pods"]] == [
        ("other-scheduler-job", "default-scheduler")
    ]
    # The job finishes (what its kubelet would report): it no longer holds capacity.
    await kube.patch(
        PODS,
        created["metadata"]["name"],
        {"status": {"phase": "Succeeded"}},
        namespace=namespace,
        subresource="status",
    )
    await until(inv, lambda: inv.node(node.name).free["nvidia.com/gpu"] == 8)  # type: ignore[union-attr]
    await agent.stop()
