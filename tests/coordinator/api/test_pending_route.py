"""``GET /v1/pending`` over a scheduler (with its gang step) running on an in-memory cluster of two
8-GPU nodes: which pods it lists and in what order, why each waits, the filters, bad input, and
a coordinator without a scheduler."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.api import pending
from coordinator.api.explain import SCHEDULER, SchedulerSlot
from coordinator.api.gangs import GANGS, GangSlot
from coordinator.app.web import build_app
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.inventory.store import Inventory
from devcluster.pods import gang_members, gpu_pod, pod


@pytest.fixture
async def api(aiohttp_client: Any) -> AsyncIterator[tuple[TestClient, MemoryCluster, Any]]:
    inventory = Inventory()
    cluster = MemoryCluster(inventory)
    for name in ("n0", "n1"):
        cluster.add_node(name, topology=discover_profile("dgx-a100", hostname=name))
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings())
    app = build_app(inventory, extra_routes=pending.ROUTES)
    app[SCHEDULER] = SchedulerSlot(runtime.scheduler)
    app[GANGS] = GangSlot(gangs.step)
    client = await aiohttp_client(app)
    async with gangs, runtime:
        yield client, cluster, runtime


async def test_waiting_pods_with_why_they_wait_highest_priority_first(api: Any) -> None:
    client, cluster, runtime = api
    cluster.create_pod(gpu_pod("fits", 2, namespace="ml"))
    cluster.create_pod(gpu_pod("too-big", 16, namespace="ml"))
    cluster.create_pod(gpu_pod("urgent-too-big", 16, namespace="ml", priority=1000))
    gated = gpu_pod("gated", 1, namespace="ml")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    cluster.create_pod(gated)
    for obj in gang_members("train", 3, count=1, namespace="ml", gpus=1, cpu=None, memory=None):
        cluster.create_pod(obj)
    await runtime.settle()

    resp = await client.get("/v1/pending")
    assert resp.status == 200
    doc = await resp.json()
    names = [p["name"] for p in doc["pods"]]
    assert doc["total"] == 4
    assert names[0] == "urgent-too-big"  # the scheduler's order: priority first
    assert set(names) == {"urgent-too-big", "too-big", "gated", "train-0"}  # not the bound one
    by_name = {p["name"]: p for p in doc["pods"]}
    big = by_name["too-big"]
    assert big["namespace"] == "ml"
    assert big["gpus"] == 16
    assert big["queue"] == "unschedulable"
    assert big["outcome"] == "unschedulable"
    assert big["attempts"] >= 1
    assert big["message"] == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert isinstance(big["tried_at"], float)
    assert by_name["gated"]["message"] == "waiting for scheduling gates: example.com/quota"
    assert by_name["train-0"]["gang"] == "train"
    assert "waiting for all 3 pods to exist" in by_name["train-0"]["message"]


async def test_a_pod_asking_for_part_of_a_gpu_shows_its_share(api: Any) -> None:
    client, cluster, runtime = api
    shares = {"topos.io/gpu-fraction": "0.5", "topos.io/gpu-memory": "200Gi"}  # no GPU has it
    cluster.create_pod(pod("half", namespace="ml", annotations=shares, cpu=None, memory=None))
    by_memory = {"topos.io/gpu-memory": "300Gi"}
    cluster.create_pod(pod("roomy", namespace="ml", annotations=by_memory, cpu=None, memory=None))
    await runtime.settle()

    doc = await (await client.get("/v1/pending")).json()
    by_name = {p["name"]: p for p in doc["pods"]}
    assert by_name["half"]["share"] == {"fraction": 0.5, "memory_mib": 200 * 1024}
    assert by_name["half"].get("gpus", 0) == 0  # no whole GPU
    assert by_name["roomy"]["share"] == {"memory_mib": 300 * 1024}
    assert "no GPU has the memory" in by_name["half"]["message"]


async def test_namespace_and_limit_filters_and_bad_values(api: Any) -> None:
    client, cluster, runtime = api
    for name in ("a", "b", "c"):
        cluster.create_pod(gpu_pod(name, 16, namespace="ml"))
    await runtime.settle()
    limited = await (await client.get("/v1/pending", params={"limit": "2"})).json()
    assert [p["name"] for p in limited["pods"]] == ["a", "b"]  # equal priority: oldest, then name
    assert limited["total"] == 3
    other = await (await client.get("/v1/pending", params={"namespace": "other"})).json()
    assert other == {"total": 0, "pods": []}
    for params in ({"limit": "0"}, {"limit": "many"}, {"namespace": ""}):
        resp = await client.get("/v1/pending", params=params)
        assert resp.status == 400, params
        assert (await resp.json())["error"] == "bad-request"


async def test_without_a_scheduler_it_answers_503(aiohttp_client: Any) -> None:
    client = await aiohttp_client(build_app(Inventory(), extra_routes=pending.ROUTES))
    resp = await client.get("/v1/pending")
    assert resp.status == 503
    assert await resp.json() == {"error": "unavailable", "message": "the scheduler is not running"}
