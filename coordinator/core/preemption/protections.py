"""Which running pods may be evicted now, and at what cost: the one answer preemption (and, later,
defragmentation) plans on. Pure: no I/O, time passed in.

* **Units.** A pod in no gang is one unit; a gang is one unit of all its running pods, evicted
  whole or not at all. A unit's priority is its highest member's.
* **Minimum runtime.** A pod that has run less than its minimum runtime may not be evicted, nor
  may its gang. The minimum is the pod's ``topos.io/min-runtime`` annotation, else the one
  configured for its PriorityClass, else for its namespace, else the default (0: none). A pod
  whose start is not known yet (bound, not reported running) has run 0 s.
* **Cost.** :class:`EvictionCost` orders units cheapest first: fewest gangs disturbed, then fewest
  pods, then the fewest GPU-seconds of work lost (GPUs held × how long each pod has run).
* **Disruption budgets.** :func:`within_budgets` walks units in order and keeps each whose
  eviction leaves every PodDisruptionBudget it touches at or above its minimum.

:func:`evictable_units` is what a planner calls: the units it may evict now, cheapest first, and
the ones protected, with why.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from coordinator.core.domains.capacity import GPU
from coordinator.core.preemption.model import DisruptionBudget, RunningPod

__all__ = [
    "DurationRule",
    "Evictable",
    "EvictionCost",
    "EvictionUnit",
    "Protections",
    "UnitCache",
    "evictable_on",
    "evictable_units",
    "format_duration",
    "gpu_milli",
    "within_budgets",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class DurationRule:
    """A duration configured by PriorityClass, by namespace and by default (seconds; 0: none)."""

    default_s: float = 0.0
    priority_classes: Mapping[str, float] = field(default_factory=dict)
    namespaces: Mapping[str, float] = field(default_factory=dict)
    annotation_max_s: float | None = None  # the most a pod's own annotation may ask; None: any

    def for_pod(self, namespace: str, priority_class: str, own: float | None = None) -> float:
        """The pod's own value (its annotation, up to ``annotation_max_s``) first, then its
        PriorityClass's, its namespace's, the default."""
        if own is not None:
            return own if self.annotation_max_s is None else min(own, self.annotation_max_s)
        if priority_class and priority_class in self.priority_classes:
            return self.priority_classes[priority_class]
        if namespace in self.namespaces:
            return self.namespaces[namespace]
        return self.default_s


@dataclass(frozen=True, slots=True, kw_only=True)
class Protections:
    """What keeps running pods from being preempted, and pending pods from preempting at once."""

    min_runtime: DurationRule = field(default_factory=DurationRule)
    """How long a pod runs before it may be preempted or moved."""
    preemption_delay: DurationRule = field(default_factory=DurationRule)
    """How long a pending pod waits before it preempts (an autoscaler's chance to add a node)."""
    evictions_per_hour: int = 0
    """The most pods preemption evicts in any hour; 0: no limit."""


@dataclass(frozen=True, slots=True, order=True)
class EvictionCost:
    """What evicting a unit disturbs, compared field by field (less is cheaper)."""

    gangs: int  # gangs broken up (each evicted whole)
    pods: int
    gpu_seconds: float  # GPU-seconds of work lost: GPUs held × how long each pod has run

    def __add__(self, other: EvictionCost) -> EvictionCost:
        return EvictionCost(
            self.gangs + other.gangs, self.pods + other.pods, self.gpu_seconds + other.gpu_seconds
        )


ZERO_COST = EvictionCost(0, 0, 0.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class EvictionUnit:
    """Pods evicted together: one pod, or every running pod of a gang."""

    unit: str  # the pod key, or "gang:<namespace/name>"
    pods: tuple[RunningPod, ...]
    priority: int  # its highest pod's
    cost: EvictionCost
    gpu_milli: int  # thousandths of GPUs it holds (a whole GPU 1000, a share its part)
    nodes: tuple[str, ...]  # where its pods run, sorted
    order: tuple[int, int, int, float, int, str]  # :func:`preference`'s key, kept

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(sorted(p.key for p in self.pods))


@dataclass(frozen=True, slots=True, kw_only=True)
class Evictable:
    units: tuple[EvictionUnit, ...]  # may be evicted now: lowest priority, then cheapest, first
    protected: Mapping[str, str]  # unit → why it may not be evicted now (its minimum runtime)
    protected_units: tuple[EvictionUnit, ...] = ()  # those units, in the same order


def gpu_milli(pod: RunningPod) -> int:
    """Thousandths of GPUs a pod holds: a share its part, a whole GPU 1000."""
    return pod.share.milli if pod.share is not None else 1000 * pod.requests.get(GPU, 0)


def format_duration(seconds: float) -> str:
    """``2h5m``, ``10m``, ``45s``: as the duration grammar writes it."""
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    parts = [f"{h}h" if h else "", f"{m}m" if m else "", f"{sec}s" if sec or s == 0 else ""]
    return "".join(parts)


def _ran(pod: RunningPod, now: float) -> float:
    return 0.0 if pod.started_at is None else max(0.0, now - pod.started_at)


def _unit(name: str, pods: Sequence[RunningPod], now: float | None) -> EvictionUnit:
    milli = [gpu_milli(p) for p in pods]
    seconds = 0.0
    if now is not None:
        seconds = sum(m / 1000 * _ran(p, now) for m, p in zip(milli, pods, strict=True) if m)
    priority = max(p.priority for p in pods)
    cost = EvictionCost(1 if pods[0].gang else 0, len(pods), seconds)
    held = sum(milli)
    return EvictionUnit(
        unit=name,
        pods=tuple(pods),
        priority=priority,
        cost=cost,
        gpu_milli=held,
        nodes=tuple(sorted({p.node for p in pods})),
        order=(priority, cost.gangs, cost.pods, cost.gpu_seconds, -held, name),
    )


def _under_min_runtime(pod: RunningPod, now: float, rule: DurationRule) -> str | None:
    least = rule.for_pod(pod.namespace, pod.priority_class, pod.min_runtime_s)
    ran = _ran(pod, now)
    if least <= 0 or ran >= least:
        return None
    if pod.started_at is None:
        return f"{pod.key} has not started yet (minimum runtime {format_duration(least)})"
    return (
        f"{pod.key} has run {format_duration(ran)} of its minimum runtime {format_duration(least)}"
    )


def preference(unit: EvictionUnit) -> tuple[int, int, int, float, int, str]:
    """Lowest priority first, then the cheapest (:class:`EvictionCost`'s order, field by
    field, flattened: sorting thousands of candidates compares plain values), then the one
    holding the most GPUs."""
    return unit.order


#: The most units a cache gains in calls over part of the running pods before it starts over.
_UNITS_KEPT = 100_000


class UnitCache:
    """The :class:`EvictionUnit` of each running pod in no gang that holds no GPU (its cost
    does not depend on the time), kept while the pod is the same ``RunningPod`` object: a
    preemptor plans over every running pod on each attempt, and most have not changed since."""

    __slots__ = ("_by_key", "_on_node", "visits")

    def __init__(self) -> None:
        self._by_key: dict[str, tuple[RunningPod, EvictionUnit]] = {}
        # node → (its pods, below, protections, their units): see evictable_on
        self._on_node: dict[
            str,
            tuple[tuple[RunningPod, ...], int, Protections | None, tuple[EvictionUnit, ...]],
        ] = {}
        #: node → what the victim search last found there, for its own use (victims.py)
        self.visits: dict[str, tuple[object, ...]] = {}


def evictable_on(
    node: str,
    pods: Sequence[RunningPod],
    *,
    below: int,
    now: float | None = None,
    protections: Protections | None = None,
    cache: UnitCache | None = None,
) -> tuple[EvictionUnit, ...]:
    """:func:`evictable_units`' ``units`` for ``pods``, the running pods of one node (none in a
    gang). ``cache`` keeps them for the node while its pods are the same objects, when none of
    the units is protected and none holds a GPU: the answer then does not change with time
    (a minimum runtime only ends; no work of a GPU is lost)."""
    if cache is not None:
        hit = cache._on_node.get(node)
        if (
            hit is not None
            and hit[1] == below
            and hit[2] is protections
            and len(hit[0]) == len(pods)
            and all(a is b for a, b in zip(hit[0], pods, strict=True))
        ):
            return hit[3]
    found = evictable_units(
        pods, below=below, now=now, protections=protections, cache=cache, merge=True
    )
    if cache is not None and not found.protected and all(u.gpu_milli == 0 for u in found.units):
        if len(cache._on_node) > _UNITS_KEPT:
            cache._on_node.clear()
        cache._on_node[node] = (tuple(pods), below, protections, found.units)
    return found.units


def evictable_units(
    running: Sequence[RunningPod],
    *,
    below: int,
    now: float | None = None,
    protections: Protections | None = None,
    leaving: Collection[str] = (),
    cache: UnitCache | None = None,
    merge: bool = False,
) -> Evictable:
    """The units of ``running`` of priority below ``below`` that may be evicted at ``now``
    (seconds since the epoch, as ``RunningPod.started_at``), cheapest first, and those the
    minimum runtime protects. ``leaving``: pods already being evicted (never counted twice).
    Without ``now`` no minimum runtime applies and no work counts as lost. ``cache``: units
    kept from the last call (only those of the same pod objects are used); ``merge``:
    ``running`` is part of the running pods (one node's), and the cache gains its units rather
    than keeping only them."""
    gangs: dict[str, list[RunningPod]] = {}
    units: list[EvictionUnit] = []
    # A pod in no gang holding no GPU is its own unit, whose cost does not change: kept.
    kept = cache._by_key if cache is not None else {}
    if merge and len(kept) > _UNITS_KEPT:
        kept.clear()  # pods gone since the last call over all of them: forget them all
    seen: dict[str, tuple[RunningPod, EvictionUnit]] = kept if merge else {}
    own = False  # does any pod carry its own minimum runtime?
    for pod in running:
        key = pod.key
        if key in leaving:
            continue
        own = own or pod.min_runtime_s is not None
        if pod.gang:
            gangs.setdefault(f"gang:{pod.gang}", []).append(pod)
            continue
        hit = kept.get(key)
        unit = hit[1] if hit is not None and hit[0] is pod else _unit(key, (pod,), now)
        if unit.gpu_milli == 0:
            seen[key] = (pod, unit)
        if unit.priority < below:
            units.append(unit)
    if cache is not None:
        cache._by_key = seen
    for name, pods in gangs.items():
        unit = _unit(name, pods, now)
        if unit.priority < below:
            units.append(unit)
    units.sort(key=preference)
    free: list[EvictionUnit] = []
    held: list[EvictionUnit] = []
    protected: dict[str, str] = {}
    rule = protections.min_runtime if protections is not None else None
    if (
        rule is not None
        and not own
        and rule.default_s <= 0
        and not any(v > 0 for v in (*rule.priority_classes.values(), *rule.namespaces.values()))
    ):
        rule = None  # no pod's own minimum, none configured: nothing is protected
    for unit in units:
        reasons = (
            [r for p in unit.pods if (r := _under_min_runtime(p, now, rule)) is not None]
            if rule is not None and now is not None
            else []
        )
        if reasons:
            protected[unit.unit] = "; ".join(sorted(reasons))
            held.append(unit)
        else:
            free.append(unit)
    return Evictable(units=tuple(free), protected=protected, protected_units=tuple(held))


def within_budgets(
    units: Sequence[EvictionUnit], budgets: Sequence[DisruptionBudget]
) -> tuple[list[EvictionUnit], dict[str, str]]:
    """``units`` in order, keeping each whose eviction (with those kept before it) no
    PodDisruptionBudget forbids; and unit → the budgets that forbid the rest."""
    if not budgets:
        return list(units), {}
    allowance = {(b.namespace, b.name): b.allowed() for b in budgets}
    usable: list[EvictionUnit] = []
    blocked: dict[str, str] = {}
    for unit in units:
        hits: dict[tuple[str, str], int] = {}
        for b in budgets:
            n = sum(1 for p in unit.pods if b.covers(p))
            if n:
                hits[(b.namespace, b.name)] = n
        over = [k for k, n in hits.items() if n > allowance[k]]
        if over:
            blocked[unit.unit] = ", ".join(f"{ns}/{name}" for ns, name in over)
            continue
        for k, n in hits.items():
            allowance[k] -= n
        usable.append(unit)
    return usable, blocked
