"""The coordinator's HTTP API: inventory routes, JSON or msgpack by Accept, JSON error bodies with
the right 4xx status for bad input, health/readiness/metrics, an OpenAPI document that lists every
route (including ones other modules add)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.api.keys import READINESS, ROUTES
from coordinator.api.render import respond
from coordinator.api.routing import Route
from coordinator.app.config.sections import Config
from coordinator.app.main import wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.app.web import build_app
from coordinator.inventory.state import BoundPod, KubeNode
from coordinator.inventory.store import Inventory
from tests.support.stream_frames import allocation, topology

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[web.Application], Awaitable[Client]]


async def _explode(request: web.Request) -> web.Response:
    raise RuntimeError("secret internal detail")


async def _echo(request: web.Request) -> web.Response:
    return respond(request, {"ns": request.match_info["ns"]})


EXTRA = (
    Route("GET", "/v1/test/boom", _explode, "always fails", "test"),
    Route("GET", "/v1/pods/{ns}/echo", _echo, "added by another module", "pods"),
)


@pytest.fixture
def inventory() -> Inventory:
    inv = Inventory(stale_ttl_s=30)
    inv.apply_hello(
        "gpu-1",
        agent_id="a",
        agent_version="1.0",
        seq=3,
        topology=topology("gpu-1", gpus=4),
        allocations=(allocation("train", "GPU-gpu-1-0"),),
    )
    inv.upsert_node(
        KubeNode(
            name="gpu-1",
            allocatable={"nvidia.com/gpu": 4, "cpu": 32000, "pods": 110},
            labels={"topos.io/leaf": "leaf-0", "topos.io/spine": "spine-0"},
        )
    )
    inv.upsert_pod(
        BoundPod(
            uid="u1",
            namespace="other",
            name="batch",
            node="gpu-1",
            scheduler="default-scheduler",
            requests={"nvidia.com/gpu": 3, "cpu": 4000},
        )
    )
    return inv


@pytest.fixture
async def client(aiohttp_client: MakeClient, inventory: Inventory) -> Client:
    app = build_app(inventory, extra_routes=EXTRA)
    app[READINESS].set("inventory", True)
    return await aiohttp_client(app)


async def _json(resp: Any) -> Any:
    assert resp.content_type == "application/json"
    return await resp.json()


async def test_node_detail_shows_free_capacity_after_other_schedulers_pods(client: Client) -> None:
    resp = await client.get("/v1/nodes/gpu-1")
    assert resp.status == 200
    body = await _json(resp)
    assert body["free"]["nvidia.com/gpu"] == 1
    assert body["free"]["cpu"] == 28000
    assert body["pods"] == [
        {
            "namespace": "other",
            "name": "batch",
            "scheduler": "default-scheduler",
            "requests": {"nvidia.com/gpu": 3, "cpu": 4000},
        }
    ]
    assert body["gpu_use"][0] == {
        "uuid": "GPU-gpu-1-0",
        "holder": "default/train",
        "source": "agent",
        "holders": [{"pod": "default/train", "source": "agent"}],
    }
    assert body["topology"]["numa_nodes"][1]["id"] == 1
    assert body["labels"]["topos.io/leaf"] == "leaf-0"


async def test_msgpack_on_request_carries_the_same_document(client: Client) -> None:
    as_json = await (await client.get("/v1/inventory")).json()
    resp = await client.get("/v1/inventory", headers={"Accept": "application/msgpack"})
    assert resp.content_type == "application/msgpack"
    as_msgpack = msgpack.unpackb(await resp.read())
    as_msgpack["nodes"][0].pop("last_seen_age_s")
    as_json["nodes"][0].pop("last_seen_age_s")
    assert as_msgpack == as_json
    assert as_json["totals"] == {
        "nodes": 1,
        "connected": 1,
        "stale": 0,
        "schedulable": 1,
        "gpus": 4,
        "gpus_free": 1,
    }


async def test_node_list_is_one_line_per_node_and_filters(client: Client) -> None:
    body = await _json(await client.get("/v1/nodes"))
    assert body["items"] == [
        {
            "name": "gpu-1",
            "stale": False,
            "connected": True,
            "schedulable": True,
            "topology_source": "stream",
            "gpus": 4,
            "gpus_free": 1,
            "product": "NVIDIA A100-SXM4-80GB",
            "mig_enabled": False,
            "leaf": "leaf-0",
            "spine": "spine-0",
        }
    ]
    assert (await _json(await client.get("/v1/nodes?stale=true")))["items"] == []
    assert len((await _json(await client.get("/v1/nodes?schedulable=1")))["items"]) == 1


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v1/nodes/nope", 404, "not-found"),
        ("GET", "/v1/nodes?stale=maybe", 400, "bad-request"),
        ("GET", "/v1/nodes?schedulable=", 400, "bad-request"),
        ("GET", "/v1/no-such-route", 404, "not-found"),
        ("POST", "/v1/nodes", 405, "method-not-allowed"),
        ("DELETE", "/v1/nodes/gpu-1", 405, "method-not-allowed"),
    ],
)
async def test_bad_requests_get_a_json_error_body(
    client: Client, method: str, path: str, status: int, code: str
) -> None:
    resp = await client.request(method, path)
    assert resp.status == status
    body = await _json(resp)
    assert body["error"] == code
    assert isinstance(body["message"], str)
    assert body["message"]


async def test_every_wrong_method_reply_says_which_methods_the_route_allows(
    aiohttp_client: MakeClient,
) -> None:
    app = wire(Config(), MemoryBackend(MemoryCluster(Inventory())))
    client = await aiohttp_client(app)
    allowed: dict[str, set[str]] = {}
    for route in app[ROUTES]:
        allowed.setdefault(route.path, set()).add(route.method)
    assert len(allowed) > 10  # inventory, explain, simulate, gangs, health, the agent stream
    for path, methods in allowed.items():
        resp = await client.request("PATCH", re.sub(r"\{\w+\}", "x", path))
        assert resp.status == 405, path
        assert (await _json(resp))["error"] == "method-not-allowed"
        assert set(resp.headers["Allow"].split(",")) == methods, path


async def test_errors_follow_accept_too(client: Client) -> None:
    resp = await client.get("/v1/nodes/nope", headers={"Accept": "application/msgpack"})
    assert resp.status == 404
    assert msgpack.unpackb(await resp.read())["error"] == "not-found"


async def test_a_bug_is_a_500_without_internals(client: Client) -> None:
    resp = await client.get("/v1/test/boom")
    assert resp.status == 500
    body = await _json(resp)
    assert body["error"] == "internal"
    assert "secret" not in body["message"]


async def test_stream_endpoint_without_upgrade_is_a_4xx(client: Client) -> None:
    resp = await client.get("/v1/agents/stream")
    assert 400 <= resp.status < 500


async def test_health_readiness_and_metrics(
    aiohttp_client: MakeClient, inventory: Inventory
) -> None:
    app = build_app(inventory)
    client = await aiohttp_client(app)
    assert (await client.get("/healthz")).status == 200
    app[READINESS].set("inventory", False)
    synced = app[READINESS].reached("inventory")  # what the scheduler waits on before it starts
    resp = await client.get("/readyz")
    assert resp.status == 503
    assert (await resp.json())["checks"] == {"inventory": False}
    assert not synced.is_set()
    app[READINESS].set("inventory", True)
    assert synced.is_set()  # at once, not at a later poll
    assert app[READINESS].reached("inventory").is_set()
    assert (await client.get("/readyz")).status == 200
    text = await (await client.get("/metrics")).text()
    assert 'topos_inventory_nodes{state="connected"} 1.0' in text
    assert "topos_stream_connections 0.0" in text


async def test_openapi_lists_every_route_with_schemas(client: Client) -> None:
    doc = await _json(await client.get("/v1/openapi.json"))
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    for path in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/v1/inventory",
        "/v1/nodes",
        "/v1/nodes/{name}",
        "/v1/agents/stream",
        "/v1/openapi.json",
        "/v1/pods/{ns}/echo",
    ]:
        assert "get" in paths[path], path
    node = paths["/v1/nodes/{name}"]["get"]
    assert node["parameters"][0]["name"] == "name"
    assert "404" in node["responses"]
    schema_ref = node["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert schema_ref.rsplit("/", 1)[1] in doc["components"]["schemas"]
    assert "NodeTopology" in doc["components"]["schemas"]
    assert (await client.get("/v1/pods/ml/echo")).status == 200
