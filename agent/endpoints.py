"""The agent's HTTP endpoints: ``/healthz``, ``/readyz`` (a discovery cycle has succeeded) and
``/metrics`` (Prometheus)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Final

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from agent.cycle import Agent
from agent.settings import AgentError, parse_listen

log = logging.getLogger("topos.agent")

AGENT_KEY: Final = web.AppKey("agent", Agent)


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    agent = request.app[AGENT_KEY]
    if agent.ready:
        return web.json_response({"status": "ready"})
    return web.json_response(
        {"status": "not ready", "reason": agent.last_error or "no discovery cycle finished yet"},
        status=503,
    )


async def _metrics(request: web.Request) -> web.Response:
    agent = request.app[AGENT_KEY]
    body = generate_latest(agent.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def make_http_app(agent: Agent) -> web.Application:
    app = web.Application()
    app[AGENT_KEY] = agent
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


@contextlib.asynccontextmanager
async def serve_http(agent: Agent, listen: str | None) -> AsyncIterator[None]:
    if listen is None:
        yield
        return
    host, port = parse_listen(listen)
    runner = web.AppRunner(make_http_app(agent), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise AgentError(f"cannot listen on {listen}: {exc.strerror or exc}") from None
        log.info("serving health and metrics", extra={"listen": listen})
        yield
    finally:
        await runner.cleanup()
