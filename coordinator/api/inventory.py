"""``/v1/inventory``, ``/v1/nodes``, ``/v1/nodes/{name}``: what the coordinator knows."""

from __future__ import annotations

from typing import Final

import msgspec
from aiohttp import web

from coordinator.api.errors import bad_request, not_found
from coordinator.api.explain import SCHEDULER
from coordinator.api.keys import INVENTORY
from coordinator.api.render import respond
from coordinator.api.routing import QueryParam, Route
from coordinator.core.dra.capacity import format_quantity
from coordinator.inventory.state import GPU_RESOURCE, DraShare, NodeState

LEAF_LABEL: Final = "topos.io/leaf"
SPINE_LABEL: Final = "topos.io/spine"


class NodeSummary(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    stale: bool
    connected: bool
    schedulable: bool
    topology_source: str | None  # "stream", "annotation" (the Node's topos.io/topology) or none
    gpus: int
    gpus_free: int
    product: str | None
    mig_enabled: bool
    leaf: str | None
    spine: str | None


class NodeList(msgspec.Struct, frozen=True, kw_only=True):
    items: list[NodeSummary]


class InventoryTotals(msgspec.Struct, frozen=True, kw_only=True):
    nodes: int
    connected: int
    stale: int
    schedulable: int
    gpus: int
    gpus_free: int


class InventoryDocument(msgspec.Struct, frozen=True, kw_only=True):
    generation: int
    totals: InventoryTotals
    nodes: list[NodeState]


def summarize(node: NodeState) -> NodeSummary:
    topo = node.topology
    products = sorted({g.product for g in topo.gpus if g.product}) if topo else []
    return NodeSummary(
        name=node.name,
        stale=node.stale,
        connected=node.connected,
        schedulable=node.schedulable,
        topology_source=node.topology_source,
        gpus=node.allocatable.get(GPU_RESOURCE, 0) if topo is None else len(topo.gpus),
        gpus_free=node.free_gpus,
        product=", ".join(products) or None,
        mig_enabled=bool(topo and any(g.mig_enabled for g in topo.gpus)),
        leaf=node.labels.get(LEAF_LABEL),
        spine=node.labels.get(SPINE_LABEL),
    )


def _flag(request: web.Request, name: str) -> bool | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise bad_request(f"query parameter {name}={raw[:40]!r} must be true or false")


async def list_nodes(request: web.Request) -> web.Response:
    stale, schedulable = _flag(request, "stale"), _flag(request, "schedulable")
    items = [
        summarize(n)
        for n in request.app[INVENTORY].nodes()
        if (stale is None or n.stale == stale)
        and (schedulable is None or n.schedulable == schedulable)
    ]
    return respond(request, NodeList(items=items))


async def get_node(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    node = request.app[INVENTORY].node(name)
    if node is None:
        raise not_found(f"node {name[:253]!r}")
    shares = dra_shares(request, node)
    return respond(request, msgspec.structs.replace(node, dra_shares=shares) if shares else node)


def dra_shares(request: web.Request, node: NodeState) -> tuple[DraShare, ...]:
    """The shares of ``node``'s DRA devices that claims hold (KEP-5075), device by device."""
    slot = request.app.get(SCHEDULER)
    if slot is None or slot.scheduler is None:
        return ()
    dra = slot.scheduler.view.dra.state()
    if not dra.consumed:
        return ()
    shares = dra.shares()
    out: list[DraShare] = []
    for device in dra.devices_on(node.name, node.labels):
        uuid = device.attribute("uuid")
        for claim, result in shares.get(device.id, ()):
            out.append(
                DraShare(
                    device=str(device.id),
                    gpu=uuid if isinstance(uuid, str) else None,
                    claim=claim,
                    share_id=result.share_id,
                    consumed={n: format_quantity(q) for n, q in result.consumed},
                )
            )
    return tuple(out)


async def get_inventory(request: web.Request) -> web.Response:
    inventory = request.app[INVENTORY]
    nodes = list(inventory.nodes())
    summaries = [summarize(n) for n in nodes]
    totals = InventoryTotals(
        nodes=len(nodes),
        connected=sum(n.connected for n in nodes),
        stale=sum(n.stale for n in nodes),
        schedulable=sum(n.schedulable for n in nodes),
        gpus=sum(s.gpus for s in summaries),
        gpus_free=sum(s.gpus_free for s in summaries if s.schedulable),
    )
    return respond(
        request, InventoryDocument(generation=inventory.generation, totals=totals, nodes=nodes)
    )


_FILTERS = (
    QueryParam(
        "stale", "only nodes whose agent is (true) or is not (false) stale", {"type": "boolean"}
    ),
    QueryParam(
        "schedulable", "only nodes that can (true) or cannot (false) take pods", {"type": "boolean"}
    ),
)

ROUTES = (
    Route(
        "GET",
        "/v1/inventory",
        get_inventory,
        "Every node's merged state, with totals",
        "inventory",
        response=InventoryDocument,
    ),
    Route(
        "GET",
        "/v1/nodes",
        list_nodes,
        "One line per node",
        "inventory",
        response=NodeList,
        query=_FILTERS,
        errors={400: "bad filter value"},
    ),
    Route(
        "GET",
        "/v1/nodes/{name}",
        get_node,
        "One node: GPUs, link matrix, NUMA, MIG, allocations, pods, free capacity, staleness, "
        "shares of its DRA devices",
        "inventory",
        response=NodeState,
        errors={404: "no such node"},
    ),
)
