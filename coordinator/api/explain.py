"""``GET /v1/pods/{ns}/{name}/explain`` and ``POST /v1/simulate``: why a pod went where it went
(or why it is still Pending), per node with the score breakdown; and where given pods would go,
changing nothing.

Both read the scheduler runtime (``coordinator.engine``) through :data:`SCHEDULER`; without a
running scheduler they answer 503.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from aiohttp import web

from common import podkeys
from common.linkhealth import health_notes
from coordinator.api.errors import ApiError, bad_request, not_found
from coordinator.api.render import respond
from coordinator.api.routing import QueryParam, Route
from coordinator.core.framework.results import Decision, Failure, NodeVerdict, ScheduleResult
from coordinator.engine.loop import Attempt, Scheduler

__all__ = [
    "MAX_SIMULATED_PODS",
    "ROUTES",
    "SCHEDULER",
    "NodeExplanation",
    "PodExplanation",
    "SchedulerSlot",
    "SimulateRequest",
    "SimulateResponse",
    "SimulatedPlacement",
    "limit_of",
    "scheduler_of",
]

MAX_SIMULATED_PODS: Final = 1000


@dataclass(slots=True)
class SchedulerSlot:
    """Holds the running scheduler (filled when the runtime starts, emptied when it stops)."""

    scheduler: Scheduler | None = None


SCHEDULER = web.AppKey("scheduler", SchedulerSlot)


class NodeExplanation(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    node: str
    feasible: bool
    code: str  # Success | Unschedulable | UnschedulableAndUnresolvable | Error
    reasons: list[str] = []
    plugin: str | None = None
    detail: str | None = None
    score: float | None = None  # total (weighted) score, feasible nodes only
    scores: dict[str, float] = {}  # plugin → weighted score
    #: What placement made of the node's GPU and link health (docs/health.md, "Placement"):
    #: GPUs not offered, degraded NVLink pairs and the class they count as, downtrained PCIe.
    health: list[str] = []


class PodExplanation(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    namespace: str
    name: str
    #: bound | binding | unschedulable | invalid | bind-failed | pending (not tried
    #: yet: a dry run now) | placed-before-restart (bound earlier; from its annotations)
    state: str
    message: str
    #: The profile (``schedulerName``) that decided, or would decide.
    profile: str | None = None
    node: str | None = None
    gpus: list[str] = []  # device ids, as written in topos.io/assigned-gpus
    gpu_indices: list[int] = []
    gpu_share: str | None = None  # a pod sharing its GPU: topos.io/gpu-share (docs/sharing.md)
    mig: list[str] = []  # "GPU <index> gi <id>"
    numa: list[int] = []
    score: float | None = None
    decided_at: float | None = None  # unix seconds
    dry_run: bool = False  # computed now rather than remembered from the attempt
    evaluated_nodes: int = 0
    feasible_nodes: int = 0
    nodes: list[NodeExplanation] = []
    #: "assigned GPUs 0,3 (NV2) but the node gave GPUs 0,4 (SYS)": the device plugin chose others
    node_gave: str | None = None
    #: The chosen node's health as placement read it ("NVLink 0–1 degraded: 2,341 CRC errors in
    #: 10 min (counted as SYS)"): why the pod got the GPUs it got.
    health: list[str] = []


class SimulateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Pods as the API server would hold them (``metadata``, ``spec``); names default to
    ``simulated-<i>``, the namespace to ``default``."""

    pods: list[dict[str, Any]]


class SimulatedPlacement(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pod: str
    placed: bool
    message: str
    node: str | None = None
    gpus: list[str] = []
    gpu_indices: list[int] = []
    numa: list[int] = []
    score: float | None = None
    breakdown: dict[str, float] = {}
    feasible_nodes: int = 0


class SimulateResponse(msgspec.Struct, frozen=True, kw_only=True):
    nodes: int
    placed: int
    results: list[SimulatedPlacement]


def scheduler_of(request: web.Request) -> Scheduler:
    slot = request.app.get(SCHEDULER)
    if slot is None or slot.scheduler is None:
        raise ApiError(503, "unavailable", "the scheduler is not running")
    return slot.scheduler


def _node_rows(verdicts: Mapping[str, NodeVerdict], chosen: str | None) -> list[NodeExplanation]:
    rows = [
        NodeExplanation(
            node=name,
            feasible=v.status.is_success,
            code=v.status.code.label,
            reasons=list(v.status.reasons),
            plugin=v.status.plugin or None,
            detail=v.status.detail or None,
            score=round(v.total, 3) if v.status.is_success else None,
            scores={k: round(s, 3) for k, s in v.scores.items()},
        )
        for name, v in verdicts.items()
    ]
    rows.sort(key=lambda r: (r.node != chosen, not r.feasible, -(r.score or 0.0), r.node))
    return rows


def _from_result(
    namespace: str,
    name: str,
    state: str,
    message: str,
    result: ScheduleResult,
    *,
    at: float | None,
    dry_run: bool,
    limit: int | None,
) -> PodExplanation:
    if isinstance(result, Decision):
        rows = _node_rows(result.verdicts, result.node)
        return PodExplanation(
            namespace=namespace,
            name=name,
            state=state,
            message=message,
            node=result.node,
            gpus=list(result.device_ids),
            gpu_indices=list(result.placement.gpus),
            gpu_share=share.text() if (share := result.placement.share) is not None else None,
            mig=[f"GPU {g} gi {gi}" for g, gi in result.placement.mig],
            numa=list(result.placement.numa),
            score=round(result.score, 3),
            decided_at=at,
            dry_run=dry_run,
            evaluated_nodes=result.evaluated,
            feasible_nodes=result.feasible,
            nodes=rows[:limit] if limit is not None else rows,
        )
    rows = _node_rows(result.verdicts, None)
    return PodExplanation(
        namespace=namespace,
        name=name,
        state=state,
        message=message,
        decided_at=at,
        dry_run=dry_run,
        evaluated_nodes=result.total_nodes,
        nodes=rows[:limit] if limit is not None else rows,
    )


def limit_of(request: web.Request) -> int | None:
    raw = request.query.get("limit")
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise bad_request(f"query parameter limit={raw[:20]!r} must be a positive integer")
    return int(raw)


def _placed_before(scheduler: Scheduler, namespace: str, name: str) -> PodExplanation | None:
    inventory = scheduler.inventory
    for node in inventory.names():
        for pod in inventory.bound_pods(node):
            if pod.namespace == namespace and pod.name == name:
                numa = pod.annotations.get(podkeys.ASSIGNED_NUMA, "")
                score = pod.annotations.get(podkeys.PLACEMENT_SCORE)
                try:
                    score_value = float(score) if score is not None else None
                except ValueError:
                    score_value = None
                placed_by = "topos" if pod.assigned_gpus or score is not None else pod.scheduler
                return PodExplanation(
                    namespace=namespace,
                    name=name,
                    state="placed-before-restart" if placed_by == "topos" else "bound",
                    message=(
                        f"bound to {node} before this coordinator started; "
                        "read back from the pod's annotations"
                        if placed_by == "topos"
                        else f"bound to {node} by {pod.scheduler}"
                    ),
                    node=node,
                    gpus=list(pod.assigned_gpus),
                    numa=[int(n) for n in numa.split(",") if n.strip().isdigit()],
                    score=score_value,
                )
    return None


def _with_health(doc: PodExplanation, scheduler: Scheduler) -> PodExplanation:
    """``doc`` with each node's health as placement read it (the chosen one's and each row's)."""

    def notes(node: str | None) -> list[str]:
        state = scheduler.inventory.node(node) if node else None
        topology = None if state is None else state.topology
        return [] if topology is None else health_notes(topology)

    rows = [msgspec.structs.replace(r, health=notes(r.node)) for r in doc.nodes]
    return msgspec.structs.replace(doc, health=notes(doc.node), nodes=rows)


def _node_gave(doc: PodExplanation, scheduler: Scheduler) -> PodExplanation:
    """``doc`` with the node's word on its devices, when it differs from the assignment."""
    state = scheduler.inventory.node(doc.node) if doc.node else None
    for mismatch in () if state is None else state.mismatches:
        if (mismatch.namespace, mismatch.pod) == (doc.namespace, doc.name):
            return msgspec.structs.replace(doc, node_gave=mismatch.message)
    return doc


async def explain_pod(request: web.Request) -> web.Response:
    scheduler = scheduler_of(request)
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    limit = limit_of(request)
    key = f"{namespace}/{name}"
    attempt: Attempt | None = scheduler.last_attempt(key)
    entry = scheduler.queue.named(key)
    if attempt is not None and (entry is None or entry.uid == attempt.uid):
        doc = _from_result(
            namespace,
            name,
            attempt.outcome,
            attempt.message,
            attempt.result,
            at=attempt.at,
            dry_run=False,
            limit=limit,
        )
        doc = msgspec.structs.replace(doc, profile=attempt.profile or None)
        return respond(request, _with_health(_node_gave(doc, scheduler), scheduler))
    if entry is not None and entry.where != "bound":
        result = scheduler.explain_now(entry)
        message = f"would go to {result.node}" if isinstance(result, Decision) else result.message
        doc = _from_result(
            namespace, name, "pending", message, result, at=None, dry_run=True, limit=limit
        )
        doc = msgspec.structs.replace(doc, profile=scheduler.framework_for(entry).name)
        return respond(request, _with_health(doc, scheduler))
    found = _placed_before(scheduler, namespace, name)
    if found is None:
        raise not_found(f"pod {key[:300]!r} (not pending for topos and not bound)")
    return respond(request, _node_gave(found, scheduler))


_DECODER: Final = msgspec.json.Decoder(SimulateRequest)


async def simulate(request: web.Request) -> web.Response:
    scheduler = scheduler_of(request)
    body = await request.read()
    try:
        doc = _DECODER.decode(body)
    except msgspec.ValidationError as exc:
        raise bad_request(f"invalid simulate request: {exc}") from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"body is not JSON: {exc}") from None
    if len(doc.pods) > MAX_SIMULATED_PODS:
        raise bad_request(f"at most {MAX_SIMULATED_PODS} pods per request, got {len(doc.pods)}")
    pods: list[dict[str, Any]] = []
    for i, raw in enumerate(doc.pods):
        pod = dict(raw)
        meta = pod.get("metadata")
        if meta is None:
            meta = {}
        if not isinstance(meta, Mapping):
            raise bad_request(f"pods[{i}].metadata must be a mapping")
        meta = dict(meta)
        meta.setdefault("name", f"simulated-{i}")
        meta.setdefault("namespace", "default")
        pod["metadata"] = meta
        pods.append(pod)
    snapshot = scheduler.view.snapshot()
    results = scheduler.plan(pods, snapshot)
    out: list[SimulatedPlacement] = []
    for result in results:
        if isinstance(result, Decision):
            out.append(
                SimulatedPlacement(
                    pod=result.pod_key,
                    placed=True,
                    message=f"would go to {result.node}",
                    node=result.node,
                    gpus=list(result.device_ids),
                    gpu_indices=list(result.placement.gpus),
                    numa=list(result.placement.numa),
                    score=round(result.score, 3),
                    breakdown={k: round(v, 3) for k, v in result.breakdown.items()},
                    feasible_nodes=result.feasible,
                )
            )
        else:
            assert isinstance(result, Failure)
            out.append(SimulatedPlacement(pod=result.pod_key, placed=False, message=result.message))
    return respond(
        request,
        SimulateResponse(nodes=len(snapshot), placed=sum(r.placed for r in out), results=out),
    )


ROUTES = (
    Route(
        "GET",
        "/v1/pods/{namespace}/{name}/explain",
        explain_pod,
        "Where a pod went and why, or why it is still pending: per-node verdicts and scores",
        "scheduling",
        response=PodExplanation,
        query=(
            QueryParam(
                "limit", "at most this many nodes (best first)", {"type": "integer", "minimum": 1}
            ),
        ),
        errors={
            400: "bad query parameter",
            404: "the pod is neither pending for topos nor bound",
            503: "the scheduler is not running",
        },
    ),
    Route(
        "POST",
        "/v1/simulate",
        simulate,
        "What-if: where would these pods go (in order, each seeing the ones before)? "
        "Nothing is assumed, reserved or written",
        "scheduling",
        response=SimulateResponse,
        request_body=SimulateRequest,
        errors={400: "malformed request", 503: "the scheduler is not running"},
    ),
)
