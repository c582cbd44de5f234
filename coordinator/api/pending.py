"""``GET /v1/pending``: the pods waiting for Topos, each with why it waits.

One line per pod in the scheduler's queue that is not bound yet: where it waits (``active``: to be
tried now; ``backoff``: failed recently, tried again shortly; ``unschedulable``: waits for the
cluster to change, or for an edit; ``in_flight``: being decided or bound right now), what it asks
for, and the message of its last attempt — the same text as its ``FailedScheduling`` Event.
``/v1/pods/{namespace}/{name}/explain`` has the per-node detail. Each pod, and each gang, also
says when it is expected to start (``expected_start``: the engine run forward on a copy of the
cluster, refreshed at most once a minute — :mod:`coordinator.forecast.live`), once a forecast
exists. Without a running scheduler the route answers 503, like explain.
"""

from __future__ import annotations

import time
from typing import Final

import msgspec
from aiohttp import web

from coordinator.api.errors import bad_request
from coordinator.api.explain import limit_of, scheduler_of
from coordinator.api.render import respond
from coordinator.api.routing import QueryParam, Route
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.sharing import WHOLE, GpuShare
from coordinator.core.queue import QueuedPod
from coordinator.engine.forecasts import Forecast, Forecasts
from coordinator.engine.loop import Scheduler

__all__ = ["ROUTES", "ExpectedStart", "PendingGang", "PendingList", "PendingPod", "ShareAsk"]

NOT_TRIED: Final = "not tried yet"


class ShareAsk(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Part of one GPU a pod asks for (``topos.io/gpu-fraction``/``-memory`` or an alias); a part
    left out follows the other on the GPU it gets."""

    fraction: float | None = None  # of the GPU's compute
    memory_mib: int | None = None
    memory_fraction: float | None = None  # of the GPU's memory (a percentage ask)


class ExpectedStart(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """When the pod is expected to start if every running pod ends when expected and nothing
    else arrives: the engine run forward on a copy of the cluster."""

    message: str  # "expected to start in ~40 min, when train-7 ends"
    in_s: float | None = None  # seconds from now; null: not within the horizon
    at: float | None = None  # unix seconds
    node: str | None = None
    #: the running pods whose end it waits for, and who said when each ends
    #: (annotation | deadline | learned)
    waits_for: dict[str, str] = {}
    unknown_ends: int = 0  # running pods with no expected end (they never end in the forecast)
    unknown: str = ""  # why the start cannot be forecast (a claim not made yet)
    made_at: float = 0.0  # unix seconds of the forecast


class PendingPod(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    namespace: str
    name: str
    queue: str  # active | backoff | unschedulable | in_flight
    attempts: int
    priority: int = 0
    created: str = ""  # metadata.creationTimestamp, as the API server wrote it
    gpus: int = 0  # whole GPUs asked for
    mig: list[str] = []  # "1g.10gb ×2": MIG instances asked for
    share: ShareAsk | None = None  # part of one GPU asked for (then gpus is 0)
    gang: str | None = None  # the gang (pod group) it belongs to, by name
    outcome: str | None = None  # of its last attempt: unschedulable | invalid | binding | ...
    message: str = NOT_TRIED  # why it waits, from its last attempt
    tried_at: float | None = None  # unix seconds of that attempt
    expected_start: ExpectedStart | None = None


class PendingGang(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A gang among the pods listed: it starts when its last member does."""

    name: str  # namespace/name of the pod group
    pods: int  # its members listed
    expected_start: ExpectedStart | None = None


class PendingList(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    total: int  # pods waiting (of ``namespace``), before ``limit``
    pods: list[PendingPod]
    gangs: list[PendingGang] = []  # the gangs of the pods listed (none: left out)


def expected_start(forecast: Forecast, now: float) -> ExpectedStart:
    return ExpectedStart(
        message=forecast.sentence(now),
        in_s=forecast.starts_in(now),
        at=forecast.starts_at,
        node=forecast.node,
        waits_for={k: forecast.sources.get(k, "unknown") for k in forecast.after},
        unknown_ends=forecast.unknown_ends,
        unknown=forecast.unknown,
        made_at=forecast.made_at,
    )


def _gangs(lines: list[PendingPod], now: float) -> list[PendingGang]:
    members: dict[str, list[PendingPod]] = {}
    for line in lines:
        if line.gang is not None:
            members.setdefault(f"{line.namespace}/{line.gang}", []).append(line)
    out: list[PendingGang] = []
    for name, pods in members.items():
        starts = [p.expected_start for p in pods]
        known = [s for s in starts if s is not None]
        last: ExpectedStart | None = None
        if known and len(known) == len(starts):
            never = [s for s in known if s.in_s is None]
            last = never[0] if never else max(known, key=lambda s: s.in_s or 0.0)
        out.append(PendingGang(name=name, pods=len(pods), expected_start=last))
    return out


def _line(scheduler: Scheduler, entry: QueuedPod, now: float) -> PendingPod:
    request = entry.request
    asked = request if isinstance(request, PodRequest) else None
    attempt = scheduler.last_attempt(entry.key)
    if attempt is not None and attempt.uid != entry.uid:
        attempt = None  # an earlier pod of that name
    namespace, _, name = entry.key.partition("/")
    return PendingPod(
        namespace=namespace,
        name=name,
        queue=entry.where,
        attempts=entry.attempts,
        priority=entry.priority,
        created=entry.created,
        gpus=asked.gpus if asked is not None else 0,
        mig=[f"{profile} ×{n}" for profile, n in asked.mig] if asked is not None else [],
        share=_share(asked.share) if asked is not None and asked.share is not None else None,
        gang=asked.gang.name if asked is not None and asked.gang is not None else None,
        outcome=attempt.outcome if attempt is not None else None,
        message=(attempt.message if attempt is not None else entry.last_message) or NOT_TRIED,
        tried_at=attempt.at if attempt is not None else None,
        expected_start=_forecast(scheduler.forecasts, entry, now),
    )


def _forecast(forecasts: Forecasts | None, entry: QueuedPod, now: float) -> ExpectedStart | None:
    forecast = forecasts.get(entry.key) if forecasts is not None else None
    if forecast is None or (forecast.uid and forecast.uid != entry.uid):
        return None
    return expected_start(forecast, now)


def _share(share: GpuShare) -> ShareAsk:
    return ShareAsk(
        fraction=None if share.milli is None else share.milli / WHOLE,
        memory_mib=share.memory_mib,
        memory_fraction=None if share.memory_milli is None else share.memory_milli / WHOLE,
    )


async def list_pending(request: web.Request) -> web.Response:
    scheduler = scheduler_of(request)
    namespace = request.query.get("namespace")
    if namespace is not None and not namespace:
        raise bad_request("query parameter namespace must not be empty")
    limit = limit_of(request)
    waiting = [e for e in scheduler.queue.entries() if e.where != "bound"]
    # The scheduler's own order: highest priority first, then the oldest.
    waiting.sort(key=lambda e: (-e.priority, e.created, e.key))
    chosen = [e for e in waiting if namespace is None or e.key.startswith(f"{namespace}/")]
    now = scheduler.forecasts.wall() if scheduler.forecasts is not None else time.time()
    pods = [_line(scheduler, e, now) for e in chosen[:limit]]
    return respond(request, PendingList(total=len(chosen), pods=pods, gangs=_gangs(pods, now)))


ROUTES = (
    Route(
        "GET",
        "/v1/pending",
        list_pending,
        "The pods waiting for Topos: where each waits in the queue, what it asks, why (its "
        "last attempt's message) and when it is expected to start; highest priority first",
        "scheduling",
        response=PendingList,
        query=(
            QueryParam("namespace", "only pods of this namespace"),
            QueryParam("limit", "at most this many pods", {"type": "integer", "minimum": 1}),
        ),
        errors={400: "bad query parameter", 503: "the scheduler is not running"},
    ),
)
