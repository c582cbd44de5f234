"""An in-memory coordinator to scrape: two 8-GPU NVSwitch nodes in two leaves of one spine, the
whole app wired from a config (``/metrics`` included), and a scrape parsed for
:mod:`tests.support.promql`."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.test_utils import TestClient

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.app.config.sections import Config
from coordinator.app.main import wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.app.scheduler import RUNNING
from coordinator.inventory.store import Inventory
from tests.support.promql import Scrape
from tests.support.sched_hw import dgx_h100

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[web.Application], Awaitable[Client]]


def two_leaf_cluster() -> MemoryCluster:
    """Two 8-GPU NVSwitch nodes, one per leaf, under one spine."""
    cluster = MemoryCluster(Inventory())
    for node, leaf in (("n1", "leaf-1"), ("n2", "leaf-2")):
        labels = {"topos.io/leaf": leaf, "topos.io/spine": "spine-1"}
        cluster.add_node(node, labels=labels, topology=dgx_h100(node))
    return cluster


async def coordinator(
    aiohttp_client: MakeClient, cluster: MemoryCluster, config: Config | None = None
) -> tuple[Client, web.Application]:
    app = wire(config or Config(), MemoryBackend(cluster))
    return await aiohttp_client(app), app


async def scrape(client: Client) -> Scrape:
    resp = await client.get("/metrics")
    assert resp.status == 200
    return Scrape.parse(await resp.text(), time.monotonic())


async def settle(app: web.Application) -> None:
    runtime = app[RUNNING].runtime
    assert runtime is not None
    await runtime.settle()


def bound(cluster: MemoryCluster) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in cluster.pods()
        if p["spec"].get("nodeName")
    }
