"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from coordinator.api import keys
from coordinator.api.cluster_metrics import read_cluster
from coordinator.api.explain import SCHEDULER
from coordinator.api.gangs import GANGS, domains_summary
from coordinator.api.keys import INVENTORY, METRICS, READINESS
from coordinator.api.render import respond
from coordinator.api.routing import Route, openapi_document


async def healthz(request: web.Request) -> web.Response:
    return respond(request, {"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    readiness = request.app[READINESS]
    status = 200 if readiness.ready else 503
    body: dict[str, object] = {
        "status": "ready" if readiness.ready else "not-ready",
        "checks": readiness.checks,
    }
    if readiness.reasons:
        body["reasons"] = readiness.reasons
    return respond(request, body, status=status)


async def metrics(request: web.Request) -> web.Response:
    m = request.app[METRICS]
    inventory = request.app[INVENTORY]
    states = {"connected": 0, "stale": 0, "schedulable": 0, "annotation_topology": 0}
    for node in inventory.nodes():
        states["connected"] += node.connected
        states["stale"] += node.stale
        states["schedulable"] += node.schedulable
        states["annotation_topology"] += node.topology_source == "annotation"
    for state, count in states.items():
        m.nodes.labels(state).set(count)
    scheduler, gangs = request.app.get(SCHEDULER), request.app.get(GANGS)
    m.cluster.refresh(
        read_cluster(
            scheduler.scheduler if scheduler is not None else None,
            gangs.step if gangs is not None else None,
            domains_summary(request.app),
        )
    )
    body = generate_latest(m.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def openapi(request: web.Request) -> web.Response:
    routes: tuple[Route, ...] = request.app[keys.ROUTES]
    return respond(request, openapi_document(routes, title="Topos coordinator", version="1"))


ROUTES = (
    Route("GET", "/healthz", healthz, "Liveness: the process serves requests", "health"),
    Route(
        "GET",
        "/readyz",
        readyz,
        "Readiness: initial sync done",
        "health",
        errors={503: "not ready yet"},
    ),
    Route(
        "GET",
        "/metrics",
        metrics,
        "Prometheus metrics",
        "health",
        response_type="text/plain; version=0.0.4",
    ),
    Route("GET", "/v1/openapi.json", openapi, "This OpenAPI document", "meta"),
)
