"""The aiohttp application: state, middleware and the route modules."""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web

from coordinator.api import agent_stream, health, inventory
from coordinator.api.errors import error_middleware
from coordinator.api.keys import (
    AGENT_AUTH,
    INVENTORY,
    METRICS,
    READINESS,
    ROUTES,
    SESSIONS,
    STREAM_TIMEOUTS,
    AgentAuthenticator,
    Readiness,
    StreamTimeouts,
    allow_any_node,
)
from coordinator.api.metrics import Metrics
from coordinator.api.routing import Route, mount
from coordinator.inventory.ingest import SessionRegistry
from coordinator.inventory.store import Inventory

CORE_ROUTES: tuple[Route, ...] = health.ROUTES + inventory.ROUTES + agent_stream.ROUTES
MAX_REQUEST_BODY = 4 * 1024 * 1024


def build_app(
    inventory_store: Inventory,
    *,
    sessions: SessionRegistry | None = None,
    metrics: Metrics | None = None,
    readiness: Readiness | None = None,
    agent_auth: AgentAuthenticator = allow_any_node,
    stream_timeouts: StreamTimeouts | None = None,
    extra_routes: Iterable[Route] = (),
) -> web.Application:
    """The API over one inventory. ``extra_routes`` come from other topics' route modules
    (explain, simulate, gangs, domains); they share the app's keys, errors and OpenAPI document."""
    app = web.Application(middlewares=[error_middleware], client_max_size=MAX_REQUEST_BODY)
    app[INVENTORY] = inventory_store
    app[SESSIONS] = sessions if sessions is not None else SessionRegistry(inventory_store)
    app[METRICS] = metrics if metrics is not None else Metrics()
    app[READINESS] = readiness if readiness is not None else Readiness()
    app[AGENT_AUTH] = agent_auth
    app[STREAM_TIMEOUTS] = stream_timeouts if stream_timeouts is not None else StreamTimeouts()
    routes = CORE_ROUTES + tuple(extra_routes)
    app[ROUTES] = routes
    mount(app, routes)
    return app
