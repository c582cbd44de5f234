"""Authentication with real ServiceAccount tokens issued by the test API server (TokenRequest),
checked by the real TokenReview: a valid token is accepted, garbage gets 401, an agent's pod-bound
token may report its own node and is refused (403) for another node, a second request with the
same token costs no second TokenReview, and read-only endpoints are open only when configured.

The HTTP side is an aiohttp app on 127.0.0.1 with the middleware installed exactly as the
coordinator installs it; its handlers stand in for the API's routes.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from common.kube import KubeClient
from coordinator.adapters.kube.podnode import KubePodNodeResolver
from coordinator.adapters.kube.tokenreview import CachingReviewer, KubeTokenReviewer, Review
from coordinator.api.errors import error_middleware
from coordinator.app.auth.middleware import agent_node, authorize_node_report, identity_of, install
from coordinator.app.auth.settings import AuthSettings
from tests.support.kube_objects import create_agent_pod, create_node, create_service_account


class CountingReviewer:
    """Counts the TokenReviews actually sent to the API server."""

    def __init__(self, inner: KubeTokenReviewer) -> None:
        self.inner = inner
        self.sent = 0

    async def review(self, token: str) -> Review:
        self.sent += 1
        return await self.inner.review(token)


async def _who(request: web.Request) -> web.Response:
    ident = identity_of(request)
    return web.json_response({"user": ident.username if ident else None})


async def _stream(request: web.Request) -> web.Response:
    """Stands in for the agent stream: the pre-upgrade check, then the hello's node check."""
    bound = await agent_node(request)
    verdict = await authorize_node_report(request, request.query["node"])
    if not verdict.allowed:
        return web.json_response({"error": "forbidden", "message": verdict.reason}, status=403)
    return web.json_response({"bound": bound})


Serve = Callable[[AuthSettings], Awaitable[tuple[str, CountingReviewer]]]


@pytest.fixture
async def serve(kube: KubeClient) -> AsyncIterator[Serve]:
    servers: list[TestServer] = []

    async def start(settings: AuthSettings) -> tuple[str, CountingReviewer]:
        counting = CountingReviewer(KubeTokenReviewer(kube))
        app = web.Application(middlewares=[error_middleware])
        install(
            app,
            settings=settings,
            reviewer=CachingReviewer(counting, ttl_s=60),
            resolver=KubePodNodeResolver(kube),
        )
        app.router.add_get("/healthz", _who)
        app.router.add_get("/v1/nodes", _who)
        app.router.add_post("/v1/simulate", _who)
        app.router.add_get("/v1/agents/stream", _stream)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("")).rstrip("/"), counting

    yield start
    for server in servers:
        await server.close()


async def _agent_pod(kube: KubeClient, namespace: str, node: str, name: str) -> dict[str, Any]:
    await create_node(kube, node)
    return await create_agent_pod(kube, namespace, name=name, node=node, service_account="agent")


async def _get(url: str, token: str | None = None, method: str = "GET") -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, headers=headers) as resp,
    ):
        return resp.status, await resp.json()


async def test_real_tokens_garbage_and_the_cache(
    kube: KubeClient, namespace: str, serve: Serve
) -> None:
    await create_service_account(kube, namespace, "reader")
    token = await kube.request_token(namespace=namespace, service_account="reader")
    base, counting = await serve(AuthSettings(agent_service_accounts=(f"{namespace}/agent",)))

    status, body = await _get(f"{base}/v1/nodes", token)
    assert status == 200
    assert body["user"] == f"system:serviceaccount:{namespace}:reader"
    assert counting.sent == 1
    for _ in range(3):  # cached: no further TokenReview
        assert (await _get(f"{base}/v1/nodes", token))[0] == 200
        assert (await _get(f"{base}/v1/simulate", token, "POST"))[0] == 200
    assert counting.sent == 1

    status, body = await _get(f"{base}/v1/nodes", "not-a-token")
    assert status == 401
    assert body == {"error": "unauthorized", "message": "invalid bearer token"}
    # a token signed by someone else: structurally a JWT, cryptographically garbage
    forged = token[: token.rindex(".") + 1] + "AAAA" + token[token.rindex(".") + 5 :]
    assert (await _get(f"{base}/v1/nodes", forged))[0] == 401
    assert (await _get(f"{base}/v1/nodes"))[0] == 401
    assert counting.sent == 3  # one review each for the two bad tokens, none without a token

    # probes need no token; the reader is not an agent
    assert (await _get(f"{base}/healthz"))[0] == 200
    status, body = await _get(f"{base}/v1/agents/stream?node=x", token)
    assert status == 403
    assert "may not open the agent stream" in body["message"]


async def test_pod_bound_agent_token_may_report_only_its_node(
    kube: KubeClient, namespace: str, serve: Serve, unique_name: Callable[[str], str]
) -> None:
    await create_service_account(kube, namespace, "agent")
    node, other = unique_name("gpu"), unique_name("gpu")
    pod = await _agent_pod(kube, namespace, node, "agent-1")
    await create_node(kube, other)
    bound = await kube.request_token(namespace=namespace, service_account="agent", bound_pod=pod)
    unbound = await kube.request_token(namespace=namespace, service_account="agent")
    base, counting = await serve(AuthSettings(agent_service_accounts=(f"{namespace}/agent",)))

    status, body = await _get(f"{base}/v1/agents/stream?node={node}", bound)
    assert (status, body) == (200, {"bound": node})
    status, body = await _get(f"{base}/v1/agents/stream?node={other}", bound)
    assert status == 403
    assert body["message"] == f"agent of node {node} may not report node {other}"
    # the agent's ServiceAccount without a pod binding does not speak for any node
    status, body = await _get(f"{base}/v1/agents/stream?node={node}", unbound)
    assert status == 403
    assert "not bound to a pod" in body["message"]
    assert counting.sent == 2


async def test_read_only_endpoints_open_by_config_writes_still_need_a_token(
    kube: KubeClient, serve: Serve
) -> None:
    base, counting = await serve(AuthSettings(open_read_only=True))
    assert (await _get(f"{base}/v1/nodes"))[0] == 200
    assert (await _get(f"{base}/v1/simulate", method="POST"))[0] == 401
    assert (await _get(f"{base}/v1/agents/stream?node=n"))[0] == 401
    assert counting.sent == 0

    closed, _ = await serve(AuthSettings())
    assert (await _get(f"{closed}/v1/nodes"))[0] == 401


async def test_auth_off_says_so_and_lets_everything_through(
    kube: KubeClient, serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="topos.coordinator.app.auth"):
        base, counting = await serve(AuthSettings(enabled=False))
    assert any("authentication is OFF" in r.getMessage() for r in caplog.records)
    status, body = await _get(f"{base}/v1/simulate", method="POST")
    assert (status, body) == (200, {"user": "topos:auth-disabled"})
    status, body = await _get(f"{base}/v1/agents/stream?node=any-node")
    assert (status, body) == (200, {"bound": None})
    assert counting.sent == 0


@pytest.fixture
def dead_kubeconfig(kubeconfig: Path, tmp_path: Path) -> Path:
    """The admin kubeconfig, pointed at a loopback port nobody listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    config = yaml.safe_load(kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{dead}"
    path = tmp_path / "dead.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


async def test_api_server_down_is_503_not_401(dead_kubeconfig: Path) -> None:
    """When TokenReview cannot be reached the caller is told to retry, not that it is invalid."""
    client = await KubeClient.connect(dead_kubeconfig)
    app = web.Application(middlewares=[error_middleware])
    install(app, settings=AuthSettings(), reviewer=CachingReviewer(KubeTokenReviewer(client)))
    app.router.add_get("/v1/nodes", _who)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        status, body = await _get(str(server.make_url("/v1/nodes")), "some-token")
    finally:
        await server.close()
        await client.close()
    assert status == 503
    assert body["error"] == "unavailable"
