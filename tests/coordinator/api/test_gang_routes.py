"""``GET /v1/gangs``, ``/v1/gangs/{ns}/{name}`` and ``/v1/domains`` over a scheduler running on an
in-memory cluster with its gang runtime: what a user sees of a bound gang, a waiting gang, an
unknown gang, bad input, and the fabric's utilisation and fragmentation, and where the tree comes
from."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from agent.devices import discover_profile
from coordinator.adapters.kube.tree import HyperNodes
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.api.explain import SCHEDULER, SchedulerSlot
from coordinator.api.gangs import GANGS, ROUTES, GangSlot
from coordinator.app.web import build_app
from coordinator.core.domains.sources import SOURCE_KEYS
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.inventory.state import KubeNode
from coordinator.inventory.store import Inventory
from devcluster.pods import gang_members, gpu_pod


@pytest.fixture
async def api(aiohttp_client: Any) -> AsyncIterator[tuple[TestClient, MemoryCluster, Any]]:
    inventory = Inventory()
    cluster = MemoryCluster(inventory)
    for i in range(4):
        cluster.add_node(
            f"n{i}",
            labels={"topos.io/leaf": f"leaf-{i // 2 + 1}", "topos.io/spine": "spine-1"},
            topology=discover_profile("dgx-a100", hostname=f"n{i}"),
        )
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings())
    app = build_app(inventory, extra_routes=ROUTES)
    app[SCHEDULER] = SchedulerSlot(runtime.scheduler)
    app[GANGS] = GangSlot(gangs.step)
    client = await aiohttp_client(app)
    async with gangs, runtime:
        yield client, cluster, runtime


async def test_a_bound_gang_and_a_waiting_gang_as_the_api_shows_them(api: Any) -> None:
    client, cluster, runtime = api
    gpus_only: dict[str, Any] = {
        "namespace": "ml",
        "gpus": 8,
        "cpu": None,
        "memory": None,
    }  # no CPU/memory requests
    for obj in gang_members("train-a", 2, prefix="a", **gpus_only):
        cluster.create_pod(obj)
    for obj in gang_members("train-b", 4, count=3, prefix="b", **gpus_only):  # 3 of 4 exist
        cluster.create_pod(obj)
    await runtime.settle()
    listed = await (await client.get("/v1/gangs")).json()
    by_name = {g["name"]: g for g in listed["gangs"]}
    assert by_name["train-a"]["phase"] == "Bound"
    assert by_name["train-a"]["bound"] == 2
    assert by_name["train-b"]["phase"] == "Pending"
    assert by_name["train-b"]["message"] == (
        "waiting for pod group train-b: 0/4 members placed (3 of 4 pods exist)"
    )
    one = await (await client.get("/v1/gangs/ml/train-a")).json()
    states = {m["pod"]: (m["state"], m.get("node")) for m in one["member_pods"]}
    assert {s for s, _ in states.values()} == {"bound"}
    assert {n for _, n in states.values()} <= {"n0", "n1", "n2", "n3"}
    # Why there: one leaf of the 2 nodes it needs, on the only GPU link class on offer.
    assert one["placement"].startswith("leaf leaf-")
    assert "(2 nodes, balanced)" in one["placement"]
    assert one["message"] == f"pod group train-a: 2/2 members bound on {one['placement']}"
    only_other = await (await client.get("/v1/gangs", params={"namespace": "other"})).json()
    assert only_other == {"gangs": []}


async def test_unknown_gang_is_404_and_an_empty_namespace_is_400(api: Any) -> None:
    client, _, _ = api
    missing = await client.get("/v1/gangs/ml/nope")
    assert missing.status == 404
    assert (await missing.json())["error"] == "not-found"
    bad = await client.get("/v1/gangs?namespace=")
    assert bad.status == 400


async def test_domains_show_free_gpus_utilisation_and_fragmentation_per_leaf(api: Any) -> None:
    client, cluster, runtime = api
    # 3 of n?'s 8 GPUs
    cluster.create_pod(gpu_pod("small", 3, namespace="ml", gang=("one", 1)))
    await runtime.settle()
    doc = await (await client.get("/v1/domains")).json()
    assert doc["cluster"]["gpus_total"] == 32
    assert doc["cluster"]["gpus_used"] == 3
    assert doc["cluster"]["fragmentation"] == 5  # idle GPUs on the partly used node
    leaves = {leaf["name"]: leaf for leaf in doc["leaves"]}
    assert set(leaves) == {"leaf-1", "leaf-2"}
    assert sum(leaf["gpus_free"] for leaf in leaves.values()) == 29
    assert doc["spines"][0]["leaves"] == ["leaf-1", "leaf-2"]


async def test_gang_routes_answer_503_without_a_scheduler(aiohttp_client: Any) -> None:
    app = build_app(Inventory(), extra_routes=ROUTES)
    app[GANGS] = GangSlot()
    client = await aiohttp_client(app)
    response = await client.get("/v1/gangs")
    assert response.status == 503
    domains = await (await client.get("/v1/domains")).json()
    assert domains["cluster"]["gpus_total"] == 0
    paths = (await (await client.get("/v1/openapi.json")).json())["paths"]
    assert {"/v1/gangs", "/v1/gangs/{namespace}/{name}", "/v1/domains"} <= set(paths)
    assert "GangView" in str(paths["/v1/gangs/{namespace}/{name}"])


async def test_domains_name_the_tree_source_and_what_of_it_is_not_used(
    aiohttp_client: Any,
) -> None:
    inventory = Inventory()
    for name in ("a-1", "a-2"):
        inventory.upsert_node(KubeNode(name=name, labels={"topos.io/leaf": "own-label"}))
    member = {"type": "Node", "selector": {"regexMatch": {"pattern": "^a-"}}}
    missing = {"type": "HyperNode", "selector": {"exactMatch": {"name": "rack-zz"}}}
    HyperNodes(inventory).replace(
        [
            {"metadata": {"name": "rack-a"}, "spec": {"tier": 1, "members": [member]}},
            {"metadata": {"name": "block"}, "spec": {"tier": 2, "members": [missing]}},
        ]
    )
    app = build_app(inventory, extra_routes=ROUTES)
    app[GANGS] = GangSlot(keys=SOURCE_KEYS)
    doc = await (await (await aiohttp_client(app)).get("/v1/domains")).json()
    assert doc["tree_source"] == "volcano"
    assert doc["tree_problems"] == [
        "HyperNode block: members[0] names HyperNode rack-zz, which does not exist: not used",
        *(
            f"node {n}: topos.io/leaf is own-label on the Node, rack-a in the volcano tree: "
            "the tree's is used"
            for n in ("a-1", "a-2")
        ),
    ]
    assert [leaf["name"] for leaf in doc["leaves"]] == ["rack-a"]  # not the Nodes' own label
    assert doc["keys"]["leaf"] == "topos.io/leaf"
