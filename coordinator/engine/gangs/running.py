"""What is running, as the pure preemption and recovery planners take it: ``RunningPod`` for every
bound pod in the inventory (with its gang), ``DisruptionBudget`` for every PodDisruptionBudget.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

from common.podkeys import GPU_SHARE
from coordinator.core.gangs.identity import GangKey, GangSpec, gang_instance_of, read_from_group
from coordinator.core.podspec.fields import FieldError
from coordinator.core.podspec.gangkeys import pod_gang_labels
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.podspec.protections import min_runtime
from coordinator.core.podspec.selectors import LabelSelector, Requirement
from coordinator.core.podspec.sharing import parse_held
from coordinator.core.preemption.defrag import movability
from coordinator.core.preemption.jobretries import eviction_costs_nothing
from coordinator.core.preemption.victims import DisruptionBudget, RunningPod
from coordinator.inventory.state import BoundPod
from coordinator.inventory.store import Inventory

log = logging.getLogger(__name__)

__all__ = [
    "RunningByNode",
    "RunningCache",
    "bound_gang",
    "bound_pods",
    "budget_of",
    "budgets",
    "pod_object",
    "recreated",
    "restartable_jobs",
    "running_pods",
]

PodGroups = Mapping[tuple[str, str], Mapping[str, Any]]


def pod_object(pod: BoundPod) -> dict[str, Any]:
    """The metadata of a bound pod (and its Workload-API group), shaped as ``gang_instance_of``
    reads pods."""
    meta: dict[str, Any] = {
        "namespace": pod.namespace,
        "name": pod.name,
        "uid": pod.uid,
        "labels": dict(pod.labels),
        "annotations": dict(pod.annotations),
    }
    if pod.owner_uid:
        owner = {"uid": pod.owner_uid, "kind": pod.owner_kind, "controller": True}
        meta["ownerReferences"] = [owner]
    obj: dict[str, Any] = {"metadata": meta}
    if pod.scheduling_group:
        obj["spec"] = {"schedulingGroup": {"podGroupName": pod.scheduling_group}}
    return obj


def recreated(pod: BoundPod) -> PodRequest | None:
    """The pod as its controller would recreate it, for placing (its kept template: the spec
    fields filters read); ``None`` when none was kept (a bare pod) or it does not parse."""
    if not pod.template:
        return None
    meta = pod_object(pod)["metadata"]
    meta["ownerReferences"] = pod.template.get("ownerReferences") or meta.get("ownerReferences")
    spec = {
        **(pod.template.get("spec") or {}),
        "schedulerName": pod.scheduler,
        "priority": pod.priority,
    }
    if pod.priority_class:
        spec["priorityClassName"] = pod.priority_class
    parsed = parse_pod({"metadata": meta, "spec": spec})
    return parsed if isinstance(parsed, PodRequest) else None


def restartable_jobs(pods: Iterable[BoundPod], jobs: Iterable[Mapping[str, Any]]) -> set[str]:
    """The uids of the Jobs whose running pods could all be evicted without the Job failing
    (:func:`~coordinator.core.preemption.jobretries.eviction_costs_nothing`)."""
    running: dict[str, int] = {}
    for pod in pods:
        if pod.owner_kind == "Job" and pod.owner_uid and not pod.terminating:
            running[pod.owner_uid] = running.get(pod.owner_uid, 0) + 1
    if not running:
        return set()
    out = set()
    for job in jobs:
        uid = str((job.get("metadata") or {}).get("uid") or "")
        if uid in running and eviction_costs_nothing(job, running[uid]):
            out.add(uid)
    return out


def bound_gang(pod: BoundPod, podgroups: PodGroups) -> GangSpec | None:
    """The gang (this run of it) a bound pod belongs to (``None``: none, or unusable labels)."""
    spec = gang_instance_of(pod_object(pod), podgroups)
    return spec if isinstance(spec, GangSpec) else None


def declares_no_gang(pod: BoundPod) -> bool:
    """The pod names no gang at all (whatever PodGroups come to exist)."""
    return gang_instance_of(pod_object(pod)) is None


def names_no_gang(pod: BoundPod) -> bool:
    """The pod's labels, annotations and group name declare no gang: then it is in none, whatever
    PodGroups exist (:func:`bound_gang` is ``None``, :func:`declares_no_gang` true). Cheaper than
    either: the common pod, read once where both would read it twice."""
    try:
        return pod_gang_labels(pod_object(pod)) is None
    except FieldError:  # a bad gang key: a problem, which the others report
        return False


def bound_pods(inventory: Inventory) -> Iterator[BoundPod]:
    for name in inventory.names():
        yield from inventory.bound_pods(name)


class RunningCache:
    """The :class:`RunningPod` of each bound pod, kept while the inventory holds the same
    ``BoundPod`` (a change replaces it) and its Job's restartability is unchanged: planners ask
    for every running pod on each attempt, and most of them have not changed since the last. A
    pod whose gang is read from a group object (a PodGroup, a Workload's, Volcano's or KAI's) is
    converted every time: its gang changes with that object; one whose labels or annotations
    alone declare its gang is kept."""

    __slots__ = ("_by_uid",)

    def __init__(self) -> None:
        # uid → (the bound pod converted, its Job restartable, the conversion, its problem)
        self._by_uid: dict[str, tuple[BoundPod, bool, RunningPod, tuple[str, str] | None]] = {}


def running_pods(
    inventory: Inventory,
    podgroups: PodGroups,
    *,
    problems: dict[str, tuple[str, str]] | None = None,
    restartable: Collection[str] = (),
    cache: RunningCache | None = None,
) -> list[RunningPod]:
    """``problems``, when given, gains pod uid → (``namespace/name``, why) for each pod whose
    ``topos.io/min-runtime`` does not parse (the configured minimum applies to it instead);
    ``restartable``: the uids of the Jobs that would recreate their pods without failing
    (:func:`restartable_jobs`); ``cache``: conversions kept from the last call."""
    out: list[RunningPod] = []
    kept = cache._by_uid if cache is not None else {}
    seen: dict[str, tuple[BoundPod, bool, RunningPod, tuple[str, str] | None]] = {}
    for pod in bound_pods(inventory):
        restarts = pod.owner_kind == "Job" and pod.owner_uid in restartable
        hit = kept.get(pod.uid)
        if hit is not None and hit[0] is pod and hit[1] == restarts:
            seen[pod.uid] = hit
            out.append(hit[2])
            if hit[3] is not None and problems is not None:
                problems[pod.uid] = hit[3]
            continue
        spec = bound_gang(pod, podgroups)
        running, problem = _converted(pod, spec, restarts)
        if problem is not None and problems is not None:
            problems[pod.uid] = problem
        if cache is not None and (
            not read_from_group(spec) if spec is not None else declares_no_gang(pod)
        ):
            seen[pod.uid] = (pod, restarts, running, problem)
        out.append(running)
    if cache is not None:
        cache._by_uid = seen
    return out


def _converted(
    pod: BoundPod, spec: GangSpec | None, restarts: bool
) -> tuple[RunningPod, tuple[str, str] | None]:
    """The pod as the planners take it (in ``spec``'s gang; ``restarts``: its Job recreates
    it without failing), and what is wrong with its ``topos.io/min-runtime`` if anything."""
    problem: tuple[str, str] | None = None
    try:
        own = min_runtime(pod.annotations)
    except FieldError as exc:
        own = None
        problem = (f"{pod.namespace}/{pod.name}", f"{exc.field}: {exc.message}")
    running = RunningPod(
        key=f"{pod.namespace}/{pod.name}",
        uid=pod.uid,
        node=pod.node,
        requests=dict(pod.requests),
        priority=pod.priority,
        labels=dict(pod.labels),
        gang=str(spec.key) if spec is not None else None,
        gpus=tuple(pod.assigned_gpus),
        share=parse_held(pod.annotations.get(GPU_SHARE, "")),
        priority_class=pod.priority_class,
        started_at=pod.started_at,
        min_runtime_s=own,
        movable=movability(pod.owner_kind, pod.annotations, restarts_free=restarts) is True,
    )
    return running, problem


class RunningByNode:
    """Every bound pod as :func:`running_pods` converts it (no Job counted restartable), node by
    node, converted again only when its node's pods change (the inventory's events): what a
    preemptor searching node by node reads of the nodes it visits, without a pass over every
    running pod on each attempt. Pods that name a gang are not kept here (their gang depends on
    the PodGroups and spans nodes): :attr:`plain` says whether there are none. Event-loop
    only; :meth:`close` unsubscribes."""

    def __init__(self, inventory: Inventory, *, keep: Callable[[RunningPod], bool]) -> None:
        """``keep``: which pods :meth:`on` gives (the others only count for :meth:`problems`)."""
        self._inventory = inventory
        self._keep = keep
        self._dirty: set[str] = set(inventory.names())
        # node → (its bound pods converted, those kept, its pods' problems, a pod names a gang)
        self._nodes: dict[str, _NodeRunning] = {}
        self._gangs: set[str] = set()  # nodes where a pod names a gang
        self._problems: dict[str, tuple[str, str]] = {}
        self.close = inventory.subscribe(lambda event: self._dirty.add(event.node))

    def _refresh(self) -> None:
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, set()
        for name in dirty:
            before = self._nodes.pop(name, None)
            if before is not None:
                for uid in before.problems:
                    self._problems.pop(uid, None)
            self._gangs.discard(name)
            bound = self._inventory.bound_pods(name)
            if not bound:
                continue
            now = _NodeRunning.of(bound, before)
            self._nodes[name] = now
            self._problems.update(now.problems)
            if now.gang:
                self._gangs.add(name)

    @property
    def plain(self) -> bool:
        """No bound pod names a gang."""
        self._refresh()
        return not self._gangs

    def on(self, name: str) -> tuple[RunningPod, ...]:
        """The pods on node ``name`` that ``keep`` keeps, in the inventory's order."""
        self._refresh()
        found = self._nodes.get(name)
        if found is None:
            return ()
        if found.kept is None:
            found.kept = tuple(p for p in found.running if self._keep(p))
        return found.kept

    def problems(self) -> Mapping[str, tuple[str, str]]:
        """Pod uid → (``namespace/name``, why) for each pod whose ``topos.io/min-runtime`` does
        not parse (as :func:`running_pods` reports them)."""
        self._refresh()
        return self._problems


class _NodeRunning:
    __slots__ = ("bound", "gang", "kept", "problems", "running")

    def __init__(
        self,
        bound: tuple[BoundPod, ...],
        running: tuple[RunningPod, ...],
        problems: dict[str, tuple[str, str]],
        gang: bool,
    ) -> None:
        self.bound = bound
        self.running = running
        self.problems = problems
        self.gang = gang
        self.kept: tuple[RunningPod, ...] | None = None

    @classmethod
    def of(cls, bound: tuple[BoundPod, ...], before: _NodeRunning | None) -> _NodeRunning:
        """``bound`` converted, each pod unchanged since ``before`` taken from it."""
        old: dict[str, tuple[BoundPod, RunningPod]] = {}
        if before is not None:
            old = {b.uid: (b, r) for b, r in zip(before.bound, before.running, strict=True)}
        kept: list[BoundPod] = []
        running: list[RunningPod] = []
        problems: dict[str, tuple[str, str]] = {}
        gang = False
        for pod in bound:
            hit = old.get(pod.uid)
            if hit is not None and hit[0] is pod:
                converted = hit[1]
                problem = before.problems.get(pod.uid) if before is not None else None
            elif declares_no_gang(pod):
                converted, problem = _converted(pod, None, False)
            else:
                gang = True
                continue
            kept.append(pod)
            running.append(converted)
            if problem is not None:
                problems[pod.uid] = problem
        return cls(tuple(kept), tuple(running), problems, gang)


def _selector(raw: object) -> LabelSelector:
    if raw is None:
        return LabelSelector()
    if not isinstance(raw, Mapping):
        raise ValueError("spec.selector must be a mapping")
    labels = raw.get("matchLabels") or {}
    exprs = raw.get("matchExpressions") or []
    if not isinstance(labels, Mapping) or not isinstance(exprs, list):
        raise ValueError("spec.selector has malformed matchLabels or matchExpressions")
    reqs: list[Requirement] = []
    for e in exprs:
        if not isinstance(e, Mapping) or e.get("operator") not in (
            "In",
            "NotIn",
            "Exists",
            "DoesNotExist",
        ):
            raise ValueError(f"spec.selector.matchExpressions: unusable entry {e!r}")
        values = e.get("values") or []
        reqs.append(Requirement(str(e.get("key")), str(e["operator"]), tuple(map(str, values))))
    return LabelSelector(tuple(sorted((str(k), str(v)) for k, v in labels.items())), tuple(reqs))


def _count_or_percent(value: object) -> int | str | None:
    if value is None or isinstance(value, int | str):
        return value
    raise ValueError(f"expected a count or a percentage, not {value!r}")


def budget_of(obj: Mapping[str, Any]) -> DisruptionBudget:
    """A PodDisruptionBudget as plain data; ``ValueError`` for one that cannot be read."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allowed = status.get("disruptionsAllowed")
    observed = status.get("observedGeneration")
    # A budget the disruption controller has not evaluated yet allows nothing (as the Eviction
    # API treats it): never plan on evictions the server will refuse.
    if observed is None or allowed is None:
        allowed = 0
    return DisruptionBudget(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        selector=_selector(spec.get("selector")),
        healthy=int(status.get("currentHealthy") or 0),
        expected=int(status.get("expectedPods") or 0),
        min_available=_count_or_percent(spec.get("minAvailable")),
        max_unavailable=_count_or_percent(spec.get("maxUnavailable")),
        disruptions_allowed=int(allowed),
    )


def budgets(objects: Iterable[Mapping[str, Any]]) -> list[DisruptionBudget]:
    out: list[DisruptionBudget] = []
    for obj in objects:
        try:
            out.append(budget_of(obj))
        except (ValueError, TypeError) as exc:
            meta = obj.get("metadata") or {}
            # Unreadable: protect everything it might cover by treating it as allowing nothing.
            log.warning(
                "PodDisruptionBudget %s/%s: %s", meta.get("namespace"), meta.get("name"), exc
            )
    return out


def gang_members(running: Iterable[RunningPod], key: GangKey) -> list[RunningPod]:
    text = str(key)
    return [p for p in running if p.gang == text]
