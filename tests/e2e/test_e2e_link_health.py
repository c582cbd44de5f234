"""Fault injection on the real control plane: a node's agent (its real cycle and health monitor,
over the profile-driven fake NVML) streams to a coordinator; an NVLink of GPU 0's bridge to GPU 1
starts logging CRC errors; a new 2-GPU pod then avoids that pair, and its Scheduled message and
its explain say why (docs/health.md, "Placement")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from agent.cycle import Agent
from agent.devices import ProfileSource, discover_profile
from agent.settings import AgentSettings
from agent.stream import StreamClient
from common.kube import EVENTS, PODS, KubeClient
from common.labels import LEAF
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from devcluster.kube_wait import wait_for_object
from devcluster.nodes import SimNode, register
from devcluster.pods import gpu_pod
from tests.support.polling import eventually
from tests.support.sim_agent import FAST

pytestmark = pytest.mark.kube

PROFILE = "ws-4x-nvlink"  # NVLink bridges 0–1 and 2–3 (NV4), NODE otherwise


@contextlib.asynccontextmanager
async def _coordinator(kubeconfig: Any, namespace: str, leaf: str) -> AsyncIterator[str]:
    config = parse_config(
        {
            "auth": {"enabled": False},
            "scheduler": {"namespace": namespace, "nodeSelector": {LEAF: leaf}},
        }
    )
    async with running(wire(config, KubeBackend(str(kubeconfig)))) as url:
        yield url


async def _bound(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return await wait_for_object(
        kube,
        PODS,
        name,
        lambda p: bool(p["spec"].get("nodeName")),
        namespace=namespace,
        what=f"pod {name} to be bound",
    )


async def test_a_degraded_nvlink_pair_is_avoided_by_a_new_two_gpu_pod(
    kube: KubeClient, kubeconfig: Any, namespace: str, unique_name: Callable[[str], str]
) -> None:
    leaf = unique_name("leaf")
    name = unique_name("ws")
    node = SimNode(
        name=name,
        profile=PROFILE,
        leaf=leaf,
        spine="s",
        topology=discover_profile(PROFILE, hostname=name),
    )
    await register(kube, [node])
    now = [0.0]
    async with _coordinator(kubeconfig, namespace, leaf) as url, aiohttp.ClientSession() as http:
        client = StreamClient(
            url.replace("http://", "ws://") + "/v1/agents/stream",
            name,
            agent_version="test",
            settings=FAST,
        )
        with ProfileSource(PROFILE, hostname=name) as source:
            agent = Agent(
                AgentSettings(node_name=name, listen=None),
                source=source,
                publisher=None,
                stream=client,
                clock=lambda: now[0],
            )
            task = asyncio.create_task(client.run())
            try:
                await agent.cycle()
                async with asyncio.timeout(60):
                    await client.connected.wait()

                # A healthy node: the first 2-GPU pod takes the bridged pair 0–1.
                await kube.create(PODS, gpu_pod("before", 2), namespace=namespace)
                before = await _bound(kube, namespace, "before")
                assert before["metadata"]["annotations"]["topos.io/assigned-gpus"].count(",") == 1
                await kube.delete(PODS, "before", namespace=namespace, grace_period_seconds=0)

                # GPU 0's NVLink port 0 (bridged to GPU 1) logs 2,341 CRC errors a minute
                # after the first cycle read none.
                source.nvml.set_nvlink(0, 0, crc=2341)
                now[0] += 60.0
                await agent.cycle()

                async def degraded() -> bool | None:
                    async with http.get(f"{url}/v1/nodes/{name}") as resp:
                        doc = await resp.json()
                    gpu0 = (doc.get("topology") or {}).get("gpus", [{}])[0]
                    links = (gpu0.get("health") or {}).get("nvlinks", [])
                    return any(k.get("status") == "degraded" for k in links) or None

                await eventually(degraded, what="the coordinator to hold the degraded link")

                await kube.create(PODS, gpu_pod("after", 2), namespace=namespace)
                after = await _bound(kube, namespace, "after")
                async with http.get(f"{url}/v1/pods/{namespace}/after/explain") as resp:
                    explain = await resp.json()
            finally:
                await client.close()
                await task
    assert sorted(explain["gpu_indices"]) == [2, 3]  # the clean NV4 pair, not 0–1
    why = "NVLink 0–1 degraded: 2,341 CRC errors in 10 min (counted as NODE)"
    assert why in explain["health"], explain["health"]
    assert after["spec"]["nodeName"] == name

    async def scheduled() -> str | None:
        listed = await kube.list(
            EVENTS, namespace=namespace, field_selector="involvedObject.name=after"
        )
        for event in listed["items"]:
            if event.get("reason") == "Scheduled":
                return str(event.get("message", ""))
        return None

    message = await eventually(scheduled, what="the Scheduled Event of the new pod")
    assert "GPUs 2,3 NVLink" in message, message
    assert "NVLink 0–1 degraded: 2,341 CRC errors in 10 min" in message, message
