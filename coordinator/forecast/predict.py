"""When will a pending pod start? The engine run forward on a copy of the cluster.

The copy (:class:`ClusterCopy`) is what the live state says now: the Node objects with their
hardware, the running pods each with how long it still runs (:mod:`.runtimes`: which source said
so), the pending pods in queue order, and the PersistentVolumeClaims, PVs, StorageClasses and
DRA objects (claims with their allocations) the scheduler reads. :func:`predict_start` loads it
into a :class:`~coordinator.forecast.engine.SimulatedEngine` on a fresh
:class:`~coordinator.forecast.clock.SimulatedLoop` — the production queue, backoff, gang manager,
preemption and nominations — ends each running pod at its expected end, and runs simulated time
forward until the pod asked about binds, or ``horizon_s`` passes. Nothing of the live state is
touched; the answer names the pods whose end let it start::

    copy = ClusterCopy(nodes=[...], running=[RunningCopy(pod, runtime), ...], pending=[...])
    p = predict_start(copy, "team-a/train-8")
    p.starts_in_s, p.node, p.after, p.message   # 2400.0, "gpu-7", ("team-a/train-7",),
                                                # "expected to start in ~40 min, when train-7 ends"

Pods whose end is unknown never end in the prediction; a pod that can start only after one of
them has no predicted start (``starts_in_s`` None) and the message says how many such pods hold
what it asks for (:func:`in_the_way`: a DaemonSet's pods, and pods asking none of its extended
resources — GPUs, MIG devices — when it asks some, are not counted). A pod that waits for someone
the copy does not hold — a claim to be made, or bound by the PV controller — has no forecast but
the reason (``Prediction.unknown``, :func:`unforeseen`). The prediction is what
the engine would do if every expected end held and nothing else arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from common.model import NodeTopology
from common.quantity import QuantityError
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.profiles import Profiles
from coordinator.core.plugins.volumebinding import claims_refusal
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from coordinator.core.podspec.resources import held_requests, quantity
from coordinator.core.podspec.selectors import match_node_terms
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.snapshot.volumes import VolumeKind, Volumes
from coordinator.engine.binder import BindJob
from coordinator.engine.claimgate import unmade_claim
from coordinator.engine.forecasts import describe
from coordinator.engine.ports import ClusterError
from coordinator.forecast.clock import SimulatedLoop
from coordinator.forecast.engine import EngineSettings, SimulatedEngine
from coordinator.forecast.runtimes import Runtime, RuntimeSource
from coordinator.inventory.dra import DraKind, object_key

__all__ = [
    "ClusterCopy",
    "NodeCopy",
    "Prediction",
    "RunningCopy",
    "predict_start",
    "predict_starts",
]

DEFAULT_HORIZON_S = 7 * 86_400.0


@dataclass(frozen=True, slots=True)
class NodeCopy:
    obj: Mapping[str, Any]  # the Node object
    topology: NodeTopology | None = None  # what its agent reports


@dataclass(frozen=True, slots=True)
class RunningCopy:
    obj: Mapping[str, Any]  # the bound Pod object (its Topos decision annotations: its GPUs)
    runtime: Runtime  # how long it still runs, and who says so


@dataclass(frozen=True, slots=True)
class ClusterCopy:
    nodes: Sequence[NodeCopy]
    running: Sequence[RunningCopy] = ()
    pending: Sequence[Mapping[str, Any]] = ()  # Pod objects, in queue order
    #: how long each pending pod runs once it starts (by namespace/name; absent or unknown:
    #: it does not end within the prediction)
    durations: Mapping[str, Runtime] = field(default_factory=dict)
    #: PersistentVolumeClaims, PersistentVolumes and StorageClasses, by kind, as the API server
    #: returns them (VolumeBinding reads them in the run as it does live)
    volumes: Sequence[tuple[VolumeKind, Mapping[str, Any]]] = ()
    #: ResourceSlices, DeviceClasses, ResourceClaims (their allocations and ``reservedFor``: a
    #: running pod's claims are freed when it ends), DeviceTaintRules and ComputeDomains, by kind
    dra: Sequence[tuple[DraKind, Mapping[str, Any]]] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    pod: str  # namespace/name
    starts_in_s: float | None  # None: not within the horizon
    node: str | None = None
    after: tuple[str, ...] = ()  # the running pods whose end it waited for (the last to end)
    sources: Mapping[str, RuntimeSource] = field(default_factory=dict)  # … and who said when
    unknown_ends: int = 0  # running pods with no expected end (they never end here)
    unknown: str = ""  # why its start cannot be forecast (then starts_in_s is None)
    message: str = ""


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


_BASIC = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})


def _asks(obj: Mapping[str, Any]) -> frozenset[str]:
    """The resources a pod holds (its effective requests), ``resourceclaims`` for its claims."""
    spec = obj.get("spec") or {}
    names = set(held_requests(spec))
    if spec.get("resourceClaims"):
        names.add("resourceclaims")
    return frozenset(names)


#: Resources every node states in ``status.allocatable``; a pod asking more of one than every
#: node has never starts, whoever ends (extended resources are left out: Topos may place them
#: from what the agents report rather than from allocatable).
_STATED = ("cpu", "memory", "ephemeral-storage")


def fits_nowhere(obj: Mapping[str, Any], nodes: Sequence[NodeCopy]) -> bool:
    """Can no node ever hold the pod, whoever ends? On each node one of what no pod's end
    changes refuses it: its allocatable (cpu, memory or ephemeral storage below what the pod
    asks), its labels and name (``nodeSelector``, required node affinity), or a ``NoSchedule`` /
    ``NoExecute`` taint the pod does not tolerate. ``False`` where the pod cannot be read or a
    node states no allocatable or an unreadable one: it might fit there, the run decides."""
    pod = parse_pod(obj)
    return not isinstance(pod, PodSpecError) and _fits_nowhere(pod, obj, nodes)


def _fits_nowhere(
    pod: PodRequest,
    obj: Mapping[str, Any],
    nodes: Sequence[NodeCopy],
    seen: dict[object, bool] | None = None,
) -> bool:
    """:func:`fits_nowhere` of ``obj`` parsed as ``pod``; ``seen``: the answers for the pods
    looked at before over the same nodes, by what the answer reads of a pod (a workload's pods
    alike are looked at once, not each over every node)."""
    if not nodes:
        return False
    asks = held_requests(obj.get("spec") or {})
    wanted = {r: asks[r] for r in _STATED if asks.get(r, 0) > 0}
    if seen is None:
        return _held_nowhere(pod, wanted, nodes)
    key = (pod.node_selector, pod.node_affinity, pod.tolerations, tuple(wanted.items()))
    try:
        found = seen.get(key)
    except TypeError:  # an unhashable part: not remembered
        return _held_nowhere(pod, wanted, nodes)
    if found is None:
        found = seen[key] = _held_nowhere(pod, wanted, nodes)
    return found


def _held_nowhere(pod: PodRequest, wanted: Mapping[str, float], nodes: Sequence[NodeCopy]) -> bool:
    for node in nodes:
        try:
            if _could_hold(pod, wanted, node.obj):
                return False
        except (QuantityError, TypeError, ValueError, AttributeError):
            return False
    return True


def _could_hold(pod: PodRequest, wanted: Mapping[str, float], node: Mapping[str, Any]) -> bool:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    for key, value in pod.node_selector:
        if labels.get(key) != value:
            return False
    required = pod.node_affinity.required if pod.node_affinity is not None else None
    if required is not None and not match_node_terms(required, str(meta.get("name")), labels):
        return False
    for raw in (node.get("spec") or {}).get("taints") or ():
        taint = Taint(str(raw.get("key", "")), str(raw.get("value") or ""), str(raw.get("effect")))
        if taint.effect in ("NoSchedule", "NoExecute") and not any(
            t.tolerates(taint) for t in pod.tolerations
        ):
            return False
    if not wanted:
        return True
    allocatable = (node.get("status") or {}).get("allocatable")
    if not isinstance(allocatable, Mapping):
        return True
    return all(quantity(r, allocatable.get(r, "0")) >= n for r, n in wanted.items())


def _daemon(obj: Mapping[str, Any]) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return any(r.get("kind") == "DaemonSet" and r.get("controller") for r in refs)


def in_the_way(waiting: Mapping[str, Any], running: Sequence[Mapping[str, Any]]) -> int:
    """How many of ``running`` (pods with no expected end) may hold what ``waiting`` asks for:
    a DaemonSet's pod never counts (one runs on every node, for good); a pod asking none of the
    waiting pod's extended resources (GPUs, MIG devices, DRA claims) does not count when it asks
    some."""
    return _InTheWay(running).count(waiting)


class _InTheWay:
    """:func:`in_the_way` for many waiting pods over the same running ones: each running pod
    read once, each distinct set of extended resources asked counted once (a run's every target
    over thousands of running pods with no expected end took most of a forecast's CPU)."""

    def __init__(self, running: Sequence[Mapping[str, Any]]) -> None:
        self._asks = [_asks(obj) for obj in running if not _daemon(obj)]
        self._counted: dict[frozenset[str], int] = {frozenset(): len(self._asks)}

    def count(self, waiting: Mapping[str, Any]) -> int:
        wanted = _asks(waiting) - _BASIC
        found = self._counted.get(wanted)
        if found is None:
            found = self._counted[wanted] = sum(1 for asks in self._asks if asks & wanted)
        return found


def _message(p: Prediction, horizon_s: float) -> str:
    return describe(
        p.starts_in_s, p.after, unknown_ends=p.unknown_ends, horizon_s=horizon_s, unknown=p.unknown
    )


def unforeseen(pod: PodRequest, claims: Collection[str], volumes: Volumes) -> str:
    """Why the start of pending pod ``pod`` cannot be forecast from a copy whose ResourceClaims
    are ``claims`` (``namespace/name``) and whose PersistentVolumeClaims, PVs and classes are
    ``volumes``, or ``""``. What it waits for is done by someone the copy does not hold, at a
    time no copy knows: a ResourceClaim it names is made (from its template by
    kube-controller-manager, or by its user: the scheduler does not try it until then), or a
    PersistentVolumeClaim of it is made, bound by the PV controller (Immediate binding), or
    mended (VolumeBinding refuses it on every node until then: ``persistentvolumeclaim "data"
    not found``)."""
    return unmade_claim(pod, claims) or claims_refusal(pod, volumes) or ""


def predict_start(
    state: ClusterCopy,
    pod: str,
    *,
    horizon_s: float = DEFAULT_HORIZON_S,
    framework: Framework | Profiles | None = None,
    settings: EngineSettings | None = None,
) -> Prediction:
    """When ``pod`` (``namespace/name``, one of ``state.pending``) binds if the engine runs on
    from ``state``. Synchronous: it runs its own simulated loop (call it off the live loop, e.g.
    ``asyncio.to_thread``)."""
    out = predict_starts(state, (pod,), horizon_s=horizon_s, framework=framework, settings=settings)
    return out[pod]


def predict_starts(
    state: ClusterCopy,
    pods: Collection[str] | None = None,
    *,
    horizon_s: float = DEFAULT_HORIZON_S,
    framework: Framework | Profiles | None = None,
    settings: EngineSettings | None = None,
) -> dict[str, Prediction]:
    """:func:`predict_start` for several pending pods (``None``: every one) in one run: it ends
    when all of them have bound, or at the horizon."""
    pending = [_key(p) for p in state.pending]
    targets = list(dict.fromkeys(pending if pods is None else pods))
    listed = set(pending)
    missing = [p for p in targets if p not in listed]
    if missing:
        raise KeyError(f"pod {missing[0]} is not among the pending pods of the copy")
    # A pod no node can ever hold (too large, a selector or affinity no node matches, taints it
    # does not tolerate) never starts and never moves anyone: it is answered at once and left
    # out of the run (a cluster's unschedulable pods would otherwise be retried through the
    # whole horizon at every refresh).
    # A pod waiting for a claim to be made or bound, by someone the copy does not hold, would
    # wait through the whole run: its start is unknown, with the reason.
    claims = {object_key(kind, obj) for kind, obj in state.dra if kind == "ResourceClaim"}
    volumes = Volumes()
    for kind, obj in state.volumes:
        volumes.put(kind, obj)
    never: set[str] = set()
    unmade: dict[str, str] = {}
    seen: dict[object, bool] = {}
    for obj in state.pending:  # each parsed once
        pod = parse_pod(obj)
        if isinstance(pod, PodSpecError):
            continue
        if why := unforeseen(pod, claims, volumes):
            unmade[_key(obj)] = why
        elif _fits_nowhere(pod, obj, state.nodes, seen):
            never.add(_key(obj))
    never |= unmade.keys()
    out: dict[str, Prediction] = {}
    for target in (t for t in targets if t in never):
        p = Prediction(pod=target, starts_in_s=None, unknown=unmade.get(target, ""))
        out[target] = replace(p, message=_message(p, horizon_s))
    rest = frozenset(t for t in targets if t not in never)
    if not rest:
        return out
    if never:
        state = replace(state, pending=[p for p in state.pending if _key(p) not in never])
    loop = SimulatedLoop()

    async def run() -> dict[str, Prediction]:
        return await _forward(state, rest, horizon_s, framework, settings)

    try:
        out.update(loop.run_until_complete(run()))
    finally:
        loop.close()
    return {t: out[t] for t in targets}


def _node_args(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    return {
        "labels": dict(meta.get("labels") or {}),
        "allocatable": dict(status.get("allocatable") or {}) or None,
        "taints": [dict(t) for t in spec.get("taints") or ()],
        "unschedulable": bool(spec.get("unschedulable")),
        "ready": ready or not status.get("conditions"),
    }


def _without_flush(settings: EngineSettings | None) -> EngineSettings:
    """The engine's settings with no unschedulable flush. The live queue sends a pod that found
    no node back after a minute even if nothing seemed to change (a safety net for changes its
    watches map to no wake-up); in the copy every change is the engine's own, and waking the pods
    it may help is the queue's, so the flush only retries pods nothing changed for: every waiting
    pod tried again each simulated minute through the whole horizon (20 pods on a cordoned node,
    24 h: 10 s of CPU, against 0.2 s without)."""
    settings = settings or EngineSettings()
    runtime = settings.runtime
    queue = replace(runtime.queue, unschedulable_flush_s=math.inf)
    return replace(settings, runtime=replace(runtime, queue=queue))


async def _forward(
    state: ClusterCopy,
    targets: frozenset[str],
    horizon_s: float,
    framework: Framework | Profiles | None,
    settings: EngineSettings | None,
) -> dict[str, Prediction]:
    loop = asyncio.get_running_loop()
    engine = SimulatedEngine(framework=framework, settings=_without_flush(settings))
    cluster = engine.cluster
    for kind, manifest in state.volumes:
        cluster.volumes.apply({**manifest, "kind": kind})
    for dra_kind, manifest in state.dra:
        cluster.dra.put(dra_kind, manifest)
    for node in state.nodes:
        name = str((node.obj.get("metadata") or {}).get("name") or "")
        cluster.add_node(name, topology=node.topology, **_node_args(node.obj))
    ended: list[tuple[float, str]] = []
    sources: dict[str, RuntimeSource] = {}
    unknown: list[Mapping[str, Any]] = []

    def finish(key: str) -> None:
        namespace, name = key.split("/", 1)
        if cluster.pod(namespace, name) is not None:
            cluster.finish_pod(namespace, name)
            ended.append((round(loop.time(), 6), key))

    for running in state.running:
        obj = copy.deepcopy(dict(running.obj))
        obj.setdefault("status", {})["phase"] = "Running"
        key = _key(obj)
        sources[key] = running.runtime.source
        cluster.create_pod(obj, keep_uid=True)  # claims name it in reservedFor
        left = running.runtime.left_s
        if left is None:
            unknown.append(obj)
            continue
        loop.call_at(left, finish, key)
    all_bound = asyncio.Event()
    bound: dict[str, tuple[float, str]] = {}  # pod → (when, node)

    def on_bind(job: BindJob, exc: ClusterError | None) -> None:
        key = job.request.key
        runs = state.durations.get(key)
        if exc is None and runs is not None and runs.left_s is not None:
            sources[key] = runs.source
            loop.call_at(loop.time() + runs.left_s, finish, key)
        if exc is None and key in targets and key not in bound:
            bound[key] = (round(loop.time(), 6), job.decision.node)
            if len(bound) == len(targets):
                all_bound.set()

    engine.scheduler.bind_listeners.append(on_bind)
    objs: dict[str, Mapping[str, Any]] = {}
    for waiting in state.pending:
        pending = copy.deepcopy(dict(waiting))
        pending.get("spec", {}).pop("nodeName", None)
        made = (pending.get("status") or {}).get("resourceClaimStatuses")
        pending["status"] = {"phase": "Pending"}
        if made:  # the claims made from its templates
            pending["status"]["resourceClaimStatuses"] = made
        objs[_key(pending)] = pending
        cluster.create_pod(pending, keep_uid=True)
    async with engine:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_bound.wait(), horizon_s)
    out: dict[str, Prediction] = {}
    in_the_way = _InTheWay(unknown)
    for target in sorted(targets):
        blocking = in_the_way.count(objs.get(target) or {})
        if target not in bound:
            p = Prediction(pod=target, starts_in_s=None, unknown_ends=blocking)
        else:
            at, where = bound[target]
            before = [(t, k) for t, k in ended if t <= at]
            last = max((t for t, _ in before), default=None)
            after = tuple(k for t, k in before if last is not None and t >= last - 1.0)
            p = Prediction(
                pod=target,
                starts_in_s=at,
                node=where,
                after=after,
                sources={k: sources[k] for k in after},
                unknown_ends=blocking,
            )
        out[target] = replace(p, message=_message(p, horizon_s))
    return out
