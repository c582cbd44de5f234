"""``GET /v1/gangs``, ``/v1/gangs/{namespace}/{name}`` and ``/v1/domains``.

Gangs come from the running gang step (:mod:`coordinator.engine.gangs`) through :data:`GANGS`;
without one (scheduler disabled, or not started yet) the gang routes answer 503. Domains are
computed from the scheduler's view (bound pods plus the ones being bound) when it runs, else
straight from the inventory, so ``/v1/domains`` works on a coordinator that only serves the API.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
from aiohttp import web

from coordinator.api.errors import ApiError, bad_request, not_found
from coordinator.api.explain import SCHEDULER
from coordinator.api.keys import INVENTORY
from coordinator.api.render import respond
from coordinator.api.routing import QueryParam, Route
from coordinator.core.domains.capacity import node_states
from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.summary import DomainsSummary, summarize_domains
from coordinator.core.gangs.identity import GangKey
from coordinator.core.gangs.manager import GangStatus
from coordinator.core.snapshot.podinfo import bound_pod_info
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.engine.gangs.step import GangStep
from coordinator.engine.view import node_info
from coordinator.inventory.store import Inventory

__all__ = [
    "GANGS",
    "ROUTES",
    "GangList",
    "GangMember",
    "GangSlot",
    "GangView",
    "RecoveryView",
    "ReservationView",
    "domains_summary",
]


@dataclass(slots=True)
class GangSlot:
    """Holds the running gang step (filled when the scheduler starts, emptied when it stops)."""

    step: GangStep | None = None
    keys: DomainKeys | None = None  # the configured tier labels, for /v1/domains


GANGS = web.AppKey("gangs", GangSlot)


class ReservationView(msgspec.Struct, frozen=True, kw_only=True):
    pod: str
    node: str
    gpus: list[str] = []


class GangMember(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pod: str
    state: str  # bound | binding | pending
    node: str | None = None


class RecoveryView(msgspec.Struct, frozen=True, kw_only=True):
    cause: str
    seconds: float  # failure noticed → every member bound again
    finished_at: float  # unix seconds


class GangView(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    namespace: str
    name: str
    source: str  # topos | kubenexus | podgroup | agentpool
    phase: str  # Pending | Waiting | Reserved | Bound | TimedOut
    min_member: int
    members: int
    reserved: int
    bound: int
    priority: int
    timeout_s: float
    age_s: float  # since the gang was first seen (or re-formed)
    deadline_in_s: float  # until the timeout releases it (negative: passed); 0 once bound
    message: str
    placement: str = ""  # why its plan chose these nodes: domain, strategy, GPU link class
    workload_uid: str = ""  # the PodGroup's or the pods' workload's UID: which run of the gang
    recovering: bool = False
    problems: list[str] = []
    reservations: list[ReservationView] = []
    member_pods: list[GangMember] = []
    recoveries: list[RecoveryView] = []


class GangList(msgspec.Struct, frozen=True, kw_only=True):
    gangs: list[GangView]


def _step(request: web.Request) -> GangStep:
    slot = request.app.get(GANGS)
    if slot is None or slot.step is None:
        raise ApiError(503, "unavailable", "the scheduler (and its gang step) is not running")
    return slot.step


def _bound_nodes(inventory: Inventory) -> dict[str, str]:
    return {
        f"{p.namespace}/{p.name}": p.node
        for node in inventory.names()
        for p in inventory.bound_pods(node)
    }


def _view(step: GangStep, status: GangStatus, nodes: dict[str, str], *, detail: bool) -> GangView:
    key = status.key
    now = step.clock()
    bound = status.phase == "Bound"
    members: list[GangMember] = []
    recoveries: list[RecoveryView] = []
    if detail:
        held = {r.pod: r.node for r in status.reservations}
        for pod in step.members(key):
            if pod in held:
                members.append(GangMember(pod=pod, state="binding", node=held[pod]))
            elif pod in nodes:
                members.append(GangMember(pod=pod, state="bound", node=nodes[pod]))
            else:
                members.append(GangMember(pod=pod, state="pending"))
        recoveries = [
            RecoveryView(cause=r.cause, seconds=round(r.seconds, 3), finished_at=r.finished_at)
            for r in step.recoveries
            if r.gang == str(key)
        ]
    return GangView(
        namespace=status.namespace,
        name=status.name,
        source=status.source,
        phase=status.phase,
        min_member=status.min_member,
        members=status.members,
        reserved=status.reserved,
        bound=status.bound,
        priority=status.priority,
        timeout_s=status.timeout_s,
        age_s=round(max(0.0, now - status.first_seen), 3),
        deadline_in_s=0.0 if bound else round(status.deadline - now, 3),
        message=status.message,
        placement=status.placement,
        workload_uid=status.uid,
        recovering=key in step.recovering,
        problems=list(status.problems),
        reservations=[
            ReservationView(pod=r.pod, node=r.node, gpus=list(r.gpus)) for r in status.reservations
        ],
        member_pods=members,
        recoveries=recoveries,
    )


async def list_gangs(request: web.Request) -> web.Response:
    step = _step(request)
    namespace = request.query.get("namespace")
    if namespace is not None and not namespace:
        raise bad_request("query parameter namespace must not be empty")
    nodes = _bound_nodes(step.scheduler.inventory)
    views = [
        _view(step, s, nodes, detail=False)
        for s in step.manager.statuses()
        if namespace is None or s.namespace == namespace
    ]
    return respond(request, GangList(gangs=views))


async def get_gang(request: web.Request) -> web.Response:
    step = _step(request)
    key = GangKey(request.match_info["namespace"], request.match_info["name"])
    runs = step.manager.find(key.namespace, key.name)  # a re-run beside its old run: the newest
    status = step.manager.status(runs[0]) if runs else None
    if status is None:
        raise not_found(f"pod group {key}")
    nodes = _bound_nodes(step.scheduler.inventory)
    return respond(request, _view(step, status, nodes, detail=True))


def _inventory_snapshot(inventory: Inventory) -> Snapshot:
    infos = []
    for state in inventory.nodes():
        if state.ready is None and state.topology is None:
            continue  # only pods known there: no Node object, no agent
        pods = tuple(bound_pod_info(p) for p in inventory.bound_pods(state.name))
        infos.append(node_info(state, pods))
    return Snapshot(infos)


def domains_summary(app: web.Application) -> DomainsSummary:
    """Utilisation and fragmentation per domain, from the scheduler's view when it runs (bound
    pods plus the ones being bound), else from the inventory (``/v1/domains`` and ``/metrics``)."""
    slot = app.get(SCHEDULER)
    if slot is not None and slot.scheduler is not None:
        snapshot = slot.scheduler.view.snapshot()
    else:
        snapshot = _inventory_snapshot(app[INVENTORY])
    gangs = app.get(GANGS)
    keys = gangs.keys if gangs is not None else None
    tree = app[INVENTORY].tree_status()
    summary = summarize_domains(node_states(snapshot), keys=keys)
    return msgspec.structs.replace(summary, tree_source=tree.source, tree_problems=tree.problems)


async def domains(request: web.Request) -> web.Response:
    return respond(request, domains_summary(request.app))


ROUTES = (
    Route(
        "GET",
        "/v1/gangs",
        list_gangs,
        "Every gang (pod group) the scheduler knows: phase, members placed and bound, message",
        "gangs",
        response=GangList,
        query=(QueryParam("namespace", "Only gangs of this namespace"),),
        errors={400: "Bad query parameter", 503: "The scheduler is not running"},
    ),
    Route(
        "GET",
        "/v1/gangs/{namespace}/{name}",
        get_gang,
        "One gang with its members, reservations and recoveries",
        "gangs",
        response=GangView,
        errors={404: "No such gang", 503: "The scheduler is not running"},
    ),
    Route(
        "GET",
        "/v1/domains",
        domains,
        "Per leaf, spine and zone: GPUs free and used, utilisation, fragmentation",
        "domains",
        response=DomainsSummary,
    ),
)
