"""A DRA fleet on the real control plane (kube-controller-manager included): simulated GPU
nodes whose GPUs only DRA serves (no ``nvidia.com/gpu`` in their allocatable), each with the
ResourceSlice NVIDIA's driver publishes for it (``devcluster.dra``), NVIDIA's GPU DeviceClass
under a name of this test's own, their
agents on the fake NVML and a real ``topos coordinator`` process scheduling this test's
namespace onto them. Everything cluster-scoped it made is deleted afterwards."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent.devices import discover_profile
from common.kube import (
    DEVICE_CLASSES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeClient,
    KubeError,
    NotFound,
)
from common.model import NodeTopology
from devcluster.churn.fleet import Agents, Coordinator, register_nodes
from devcluster.dra import publish_node
from devcluster.kube_wait import DEFAULT_TIMEOUT_S, scheduled_message, wait_for_object
from devcluster.nodes import SimNode
from tests.support.dra import gpu_class


@dataclass
class DraFleet:
    kube: KubeClient
    namespace: str
    nodes: list[SimNode]
    coordinator: Coordinator
    agents: Agents
    class_name: str
    topologies: dict[str, NodeTopology] = field(default_factory=dict)

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A Pod, ResourceClaim or ResourceClaimTemplate in this test's namespace."""
        kinds = {
            "Pod": PODS,
            "ResourceClaim": RESOURCE_CLAIMS,
            "ResourceClaimTemplate": RESOURCE_CLAIM_TEMPLATES,
        }
        obj = dict(obj)
        obj["metadata"] = {**obj["metadata"]}
        obj["metadata"].pop("namespace", None)
        return await self.kube.create(kinds[obj.get("kind", "Pod")], obj, namespace=self.namespace)

    async def bound(self, name: str) -> dict[str, Any]:
        try:
            return await wait_for_object(
                self.kube,
                PODS,
                name,
                lambda pod: bool(pod["spec"].get("nodeName")),
                namespace=self.namespace,
                what=f"pod {name} to be bound",
            )
        except AssertionError as exc:
            obj = await self.kube.get(PODS, name, namespace=self.namespace)
            why = scheduled_message(obj, status="False")
            raise AssertionError(f"{exc}; PodScheduled: {why}") from None

    async def claim(self, name: str, predicate: Any = None) -> dict[str, Any]:
        """The claim once ``predicate`` holds (default: allocated)."""
        return await wait_for_object(
            self.kube,
            RESOURCE_CLAIMS,
            name,
            predicate or (lambda c: bool((c.get("status") or {}).get("allocation"))),
            namespace=self.namespace,
            timeout_s=DEFAULT_TIMEOUT_S,
            what=f"claim {name}",
        )


async def _delete(kube: KubeClient, resource: Any, name: str) -> None:
    with contextlib.suppress(NotFound, KubeError):
        await kube.delete(resource, name)


@contextlib.asynccontextmanager
async def dra_fleet(
    kube: KubeClient,
    kubeconfig: Path,
    namespace: str,
    directory: Path,
    *,
    profile: str = "dgx1-v100",
    count: int = 1,
    extended: bool = False,
    start: bool = True,
    shared: bool = False,
) -> AsyncIterator[DraFleet]:
    """``extended``: the DeviceClass serves ``nvidia.com/gpu`` (KEP-5004). ``start``: start
    the coordinator and agents now (otherwise the test calls :func:`start_fleet`). ``shared``:
    whole GPUs are published shareable (consumable capacity)."""
    run = uuid.uuid4().hex[:6]
    nodes = await register_nodes(kube, run, ((profile, count),))
    class_name = f"gpu-{run}.nvidia.com"
    device_class = gpu_class(class_name, extended=extended)
    coordinator = Coordinator("dra", kubeconfig, namespace, run, directory)
    agents = Agents(kubeconfig, nodes, coordinator.url, directory / "agents-dra.log")
    fleet = DraFleet(kube, namespace, nodes, coordinator, agents, class_name)
    slices: list[str] = []
    try:
        for node in nodes:
            # Only DRA serves these GPUs: the device plugin's resource leaves the allocatable.
            gone = {"nvidia.com/gpu": None}
            await kube.patch(
                NODES,
                node.name,
                {"status": {"capacity": gone, "allocatable": gone}},
                subresource="status",
            )
            topology = discover_profile(profile, hostname=node.name)
            fleet.topologies[node.name] = topology
            published = await publish_node(kube, node.name, profile, shared=shared)
            slices.append(published["metadata"]["name"])
        await kube.create(DEVICE_CLASSES, device_class)
        if start:
            await start_fleet(fleet)
        yield fleet
    finally:
        coordinator.stop()
        agents.stop()
        await _delete(kube, DEVICE_CLASSES, class_name)
        for name in slices:
            await _delete(kube, RESOURCE_SLICES, name)
        for node in nodes:
            await _delete(kube, NODES, node.name)


async def start_fleet(fleet: DraFleet) -> None:
    fleet.coordinator.start()
    await fleet.coordinator.wait_serving()
    await fleet.agents.start()


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path
