"""Defragmentation: move *movable* pods so that a waiting pod or gang fits when free capacity is
only scattered (docs/defragmentation.md). Pure: plain data in, a plan or a ``Status`` out.

* **Movable.** A pod a controller recreates — owned by a ReplicaSet (a Deployment's), a
  StatefulSet, or a Job that would recreate it without failing (its ``podFailurePolicy``
  ignores ``DisruptionTarget``, or it has retries left: :mod:`.jobretries`) — or one marked
  ``topos.io/movable: "true"`` that some controller owns. A bare pod is never moved; a bare pod
  marked movable is refused (:func:`movability`).
* **The moves.** The fewest, cheapest movable units (a gang whole) of priority at or below the
  waiting workload's whose eviction lets it be placed as it would be placed anyway (its whole
  node, NVLink domain, clique or leaf: :func:`~.victims.select_victims` with the gang's
  placement intent), honouring minimum runtimes and PodDisruptionBudgets.
* **They fit elsewhere.** Every moved pod must pass the scheduling framework's filters on a node
  it does not leave, the other moves made and the waiting workload holding its room
  (:mod:`.relocate`): defragmentation makes room, it never turns a running pod into a pending
  one.
* **Cost model.** The GPU-seconds of work the moves lose must be at most ``max_loss_ratio`` of
  the waiting workload's GPU-seconds (its GPUs × ``horizon_s``), and a higher-priority waiting
  workload may lose more: the ratio grows by one half for every ``priority_step`` of priority
  it has above the moved pods'.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.layout import DomainKeys, Layout, build_layout
from coordinator.core.domains.packing import EligibleFn, Member
from coordinator.core.domains.strategy import PlacementIntent
from coordinator.core.preemption.model import DisruptionBudget, RunningPod
from coordinator.core.preemption.protections import Protections, evictable_units, within_budgets
from coordinator.core.preemption.relocate import RelocateFn, by_requests
from coordinator.core.preemption.victims import PreemptionPlan, select_victims
from coordinator.core.status import Status

__all__ = [
    "MODES",
    "MOVABLE",
    "RECREATING_KINDS",
    "Compaction",
    "DefragPlan",
    "DefragPlanner",
    "DefragSettings",
    "movability",
    "plan_compaction",
    "plan_defrag",
]

MOVABLE = "topos.io/movable"
#: Owners whose controller recreates an evicted pod on its own.
RECREATING_KINDS = frozenset({"ReplicaSet", "StatefulSet", "Deployment"})
MODES = ("off", "onDemand", "background")
CANNOT = "defragmentation cannot make room"


@dataclass(frozen=True, slots=True, kw_only=True)
class DefragSettings:
    """``defragmentation`` in the coordinator's config."""

    mode: str = "onDemand"
    max_loss_ratio: float = 0.05
    """GPU-seconds lost at most this share of the waiting workload's GPU-seconds."""
    horizon_s: float = 3600.0
    """The waiting workload's GPU-seconds are its GPUs × this (how long it is expected to run)."""
    priority_step: int = 100
    evictions_per_hour: int = 20
    """``background``: the most pods compaction moves in any hour (on demand: the preemption
    budget, ``gangs.protections.evictionsPerHour``, counts moves too)."""
    interval_s: float = 60.0
    """``background``: the least time between two compactions."""
    gather: bool = True
    """A gang the planner would split over NVLink cliques asks for moves into one clique
    (``gather.py``)."""
    compact_racks: bool = False
    """``background``: compaction may also empty a whole NVLink rack (clique) by moving its
    movable gangs whole into other racks in use, and its lone pods onto nodes in use."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode: {self.mode!r} is none of {', '.join(MODES)}")
        if self.max_loss_ratio < 0:
            raise ValueError(f"maxLossRatio: {self.max_loss_ratio!r} is negative")
        if self.horizon_s <= 0:
            raise ValueError(f"horizonSeconds: {self.horizon_s!r} is not positive")
        if self.priority_step <= 0:
            raise ValueError(f"priorityStep: {self.priority_step!r} is not positive")
        if self.interval_s <= 0:
            raise ValueError(f"intervalSeconds: {self.interval_s!r} is not positive")
        if self.evictions_per_hour < 0:
            raise ValueError(f"evictionsPerHour: {self.evictions_per_hour!r} is negative")

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    @property
    def gathers(self) -> bool:
        """Is gathering on (it needs defragmentation on)?"""
        return self.gather and self.enabled


def movability(
    owner_kind: str, annotations: Mapping[str, str], *, restarts_free: bool = False
) -> bool | str:
    """``True``: the pod may be moved; ``False``: it may not; a string: it is marked movable but
    may not be (why, naming the key and the value). ``restarts_free``: its controller is a Job
    that would recreate it without failing (:func:`~.jobretries.eviction_costs_nothing`)."""
    mark = annotations.get(MOVABLE)
    marked = mark is not None and mark.strip().lower() == "true"
    refused = mark is not None and mark.strip().lower() == "false"
    if owner_kind in RECREATING_KINDS or (owner_kind == "Job" and restarts_free):
        return not refused
    if not marked:
        return False
    if not owner_kind:
        return (
            f'metadata.annotations[{MOVABLE}]: "{mark}" on a pod no controller owns: '
            "nothing would recreate it, so it is never moved"
        )
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class DefragPlan:
    """The moves (as a preemption plan: the waiting members' nodes, the units evicted), where
    each moved pod fits afterwards, and what it costs."""

    plan: PreemptionPlan
    destinations: tuple[tuple[str, str], ...]  # (moved pod, a node it fits on)
    lost_gpu_seconds: float
    value_gpu_seconds: float  # the waiting workload's GPU-seconds, as the cost model counts it

    @property
    def moved(self) -> tuple[str, ...]:
        return self.plan.victim_pods

    def describe(self, beneficiary: str) -> str:
        nodes = ", ".join(sorted({n for _, n in self.plan.nominated}))
        pods = ", ".join(self.moved)
        return (
            f"{beneficiary} defragments: moving {len(self.moved)} pod"
            f"{'s' if len(self.moved) != 1 else ''} ({pods}) frees room on {nodes} "
            f"({self.lost_gpu_seconds:.0f} GPU-seconds of work lost, for "
            f"{self.value_gpu_seconds:.0f} of the waiting workload's)"
        )


#: :func:`plan_defrag`'s signature: the engine's planner of moves (``coordinator.sim`` passes a
#: baseline's).
DefragPlanner = Callable[..., "DefragPlan | Status"]


def plan_defrag(
    waiting: Sequence[Member],
    *,
    priority: int,
    nodes: Sequence[NodeState],
    running: Sequence[RunningPod],
    settings: DefragSettings,
    budgets: Sequence[DisruptionBudget] = (),
    intent: PlacementIntent | None = None,
    keys: DomainKeys | None = None,
    eligible: EligibleFn | None = None,
    now: float | None = None,
    protections: Protections | None = None,
    relocate: RelocateFn | None = None,
) -> DefragPlan | Status:
    """The cheapest moves of movable pods (``RunningPod.movable``) of priority at most
    ``priority`` that let ``waiting`` fit, each moved pod fitting elsewhere; or why none. Only
    a workload that asks for GPUs, no more than are free on schedulable nodes in all (its wait
    is one of scattered GPUs), is planned for. ``relocate``: where the moved pods go (the engine
    passes :func:`~.relocate.by_filters`, the scheduling framework's filters); by default by
    their requests alone."""
    need = sum(m.requests.get(GPU, 0) for m in waiting)
    if need == 0 or sum(n.gpus_free for n in nodes if n.schedulable) < need:
        # Not scattered: too few GPUs are free for it at all (or it asks for none).
        return Status.unschedulable(CANNOT, detail="too few GPUs are free for it anywhere")
    movable = [p for p in running if p.movable and p.priority <= priority]
    if not movable:
        return Status.unschedulable(CANNOT, detail="no movable pod would make room")
    found = select_victims(
        waiting,
        priority=priority + 1,
        nodes=nodes,
        running=movable,
        budgets=budgets,
        intent=intent,
        keys=keys,
        eligible=eligible,
        now=now,
        protections=protections,
    )
    if isinstance(found, Status):
        detail = found.detail.replace("evicting every lower-priority pod", "moving every pod")
        return Status.unschedulable(CANNOT, detail=detail)
    if not found.victims:
        return Status.unschedulable(CANNOT, detail="the workload fits without moving anyone")
    keys_moved = set(found.victim_pods)
    moved = [p for p in movable if p.key in keys_moved]
    if relocate is None:
        relocate = by_requests(
            {n.name: n.free for n in nodes if n.schedulable}, {m.name: m.requests for m in waiting}
        )
    placed = relocate(moved, found.nominated)
    if isinstance(placed, str):
        return Status.unschedulable(CANNOT, detail=f"{placed} (no move is made)")
    keys = keys or DomainKeys()
    if keys.clique:
        split = _gang_leaving_its_clique(nodes, moved, placed, keys)
        if split is not None:
            return Status.unschedulable(
                CANNOT,
                detail=f"moving gang {split} would take it out of its NVLink clique: it would "
                "not fit whole in one clique elsewhere (no move is made)",
            )
    units = evictable_units(moved, below=priority + 1, now=now)
    lost = sum(u.cost.gpu_seconds for u in units.units)
    value = sum(m.requests.get(GPU, 0) for m in waiting) * settings.horizon_s
    above = max(0, priority - max(p.priority for p in moved))
    allowed = value * settings.max_loss_ratio * (1 + 0.5 * (above // settings.priority_step))
    if lost > allowed:
        return Status.unschedulable(
            CANNOT,
            detail=(
                f"moving {', '.join(sorted(keys_moved))} would lose {lost:.0f} GPU-seconds of "
                f"work, more than the {allowed:.0f} the waiting workload's "
                f"{value:.0f} GPU-seconds are worth (maxLossRatio {settings.max_loss_ratio})"
            ),
        )
    return DefragPlan(
        plan=found, destinations=tuple(placed), lost_gpu_seconds=lost, value_gpu_seconds=value
    )


def _gang_leaving_its_clique(
    nodes: Sequence[NodeState],
    moved: Sequence[RunningPod],
    placed: Sequence[tuple[str, str]],
    keys: DomainKeys,
) -> str | None:
    """A moved gang that runs inside one NVLink clique now and whose destinations are not all in
    one clique (a move would cost it its NVLink fabric), or ``None``."""
    by_gang: dict[str, list[RunningPod]] = {}
    for pod in moved:
        if pod.gang:
            by_gang.setdefault(pod.gang, []).append(pod)
    if not by_gang:
        return None  # lone pods: the fabric is read only where a gang moves
    layout = build_layout(nodes, keys=keys)
    where = dict(placed)
    for gang, pods in sorted(by_gang.items()):
        now = {layout.clique_of.get(p.node) for p in pods}
        if len(now) != 1 or None in now:
            continue
        after = {layout.clique_of.get(where.get(p.key, "")) for p in pods}
        if len(after) != 1 or None in after:
            return gang
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Compaction:
    """``background``: the movable pods of one node (or of one NVLink rack) moved onto nodes
    already in use, so that the node (the rack) is free whole while nothing waits."""

    node: str  # the node freed, or the clique (``clique``)
    moved: tuple[RunningPod, ...]
    destinations: tuple[tuple[str, str], ...]  # (moved pod, a node it fits on)
    lost_gpu_seconds: float
    clique: bool = False  # ``node`` names an NVLink clique emptied whole

    def describe(self) -> str:
        pods = ", ".join(sorted(p.key for p in self.moved))
        what = f"NVLink clique {self.node}" if self.clique else self.node
        return (
            f"compaction frees {what} whole: moving {len(self.moved)} pod"
            f"{'s' if len(self.moved) != 1 else ''} ({pods}) onto nodes already in use "
            f"({self.lost_gpu_seconds:.0f} GPU-seconds of work lost)"
        )


def plan_compaction(
    nodes: Sequence[NodeState],
    running: Sequence[RunningPod],
    *,
    max_pods: int,
    settings: DefragSettings | None = None,
    budgets: Sequence[DisruptionBudget] = (),
    now: float | None = None,
    protections: Protections | None = None,
    relocate: RelocateFn | None = None,
    keys: DomainKeys | None = None,
) -> Compaction | None:
    """The node whose GPU pods, all movable, in no gang, past their minimum runtime and within
    their PodDisruptionBudgets, fit on other nodes already holding GPU pods — fewest pods, then
    least work lost; ``None`` when no node can be emptied so (or only by moving more than
    ``max_pods``, or losing more GPU-seconds than ``settings.max_loss_ratio`` of the node's GPUs
    × ``settings.horizon_s``: what a whole node freed is worth). ``relocate``: as
    :func:`plan_defrag`'s.

    A node of an NVLink clique (``keys.clique``) is emptied only when that leaves the whole
    clique idle: a tray freed in a rack still in use frees nothing a rack-wide gang can have,
    and its GPUs, moved elsewhere, are stranded in the rack (docs/topology.md). With
    ``settings.compact_racks`` a whole rack is emptied first where it can be
    (:func:`_empty_rack`)."""
    settings = settings or DefragSettings()
    by_node: dict[str, list[RunningPod]] = {}
    for pod in running:
        by_node.setdefault(pod.node, []).append(pod)
    used = [n for n in nodes if n.schedulable and n.gpus_used > 0]
    layout = build_layout(nodes, keys=keys or DomainKeys())
    busy: dict[str, int] = {}  # clique → GPUs in use
    for n in nodes:
        if (clique := layout.clique_of.get(n.name)) is not None:
            busy[clique] = busy.get(clique, 0) + n.gpus_used
    given = relocate
    if relocate is None:
        relocate = by_requests({n.name: n.free for n in used}, {})
    if settings.compact_racks and layout.cliques:
        rack = _empty_rack(
            layout,
            nodes,
            running,
            busy,
            max_pods=max_pods,
            settings=settings,
            budgets=budgets,
            now=now,
            protections=protections,
            relocate=given or by_requests({n.name: n.free for n in nodes if n.schedulable}, {}),
        )
        if rack is not None:
            return rack  # a whole rack first: what a rack-wide gang needs
    best: tuple[int, float, str] | None = None
    found: Compaction | None = None
    for node in used:
        pods = by_node.get(node.name, [])
        if (
            not pods
            or len(pods) > max_pods
            or node.gpus_free == 0
            or any(not p.movable or p.gang for p in pods)
        ):
            continue
        clique = layout.clique_of.get(node.name)
        if clique is not None and busy[clique] > node.gpus_used:
            continue  # the rack stays in use: the tray's GPUs would only be stranded there
        units = evictable_units(
            pods, below=max(p.priority for p in pods) + 1, now=now, protections=protections
        )
        if units.protected:
            continue
        _, blocked = within_budgets(units.units, budgets)
        if blocked:
            continue
        placed = relocate(pods, (), onto={n.name for n in used if n.name != node.name})
        if isinstance(placed, str):
            continue
        lost = sum(u.cost.gpu_seconds for u in units.units)
        if lost > settings.max_loss_ratio * node.gpus_total * settings.horizon_s:
            continue
        rank = (len(pods), lost, node.name)
        if best is None or rank < best:
            best = rank
            found = Compaction(
                node=node.name,
                moved=tuple(pods),
                destinations=tuple(placed),
                lost_gpu_seconds=lost,
            )
    return found


def _holds_gpus(pod: RunningPod) -> bool:
    return pod.requests.get(GPU, 0) > 0 or bool(pod.gpus) or pod.share is not None


def _empty_rack(
    layout: Layout,
    nodes: Sequence[NodeState],
    running: Sequence[RunningPod],
    busy: Mapping[str, int],
    *,
    max_pods: int,
    settings: DefragSettings,
    budgets: Sequence[DisruptionBudget],
    now: float | None,
    protections: Protections | None,
    relocate: RelocateFn,
) -> Compaction | None:
    """The NVLink rack in use whose GPU pods, all movable and past their minimum runtime, can
    leave it so that it is idle: each gang in it whole into one other rack in use (the tightest
    that holds it, as the planner's ``balanced`` clique tier would place it again), each lone
    pod onto a node in use outside it — fewest pods, then least work lost, at most
    ``max_pods`` pods and ``settings.max_loss_ratio`` of the rack's GPUs × ``horizon_s``."""
    state = {n.name: n for n in nodes}
    used = {n.name for n in nodes if n.schedulable and n.gpus_used > 0}
    by_gang: dict[str, list[RunningPod]] = {}
    for pod in running:
        if pod.gang:
            by_gang.setdefault(pod.gang, []).append(pod)
    free: dict[str, int] = {}  # clique → free GPUs on its schedulable nodes
    for name, clique in layout.cliques.items():
        free[name] = sum(state[n].gpus_free for n in clique.nodes if state[n].schedulable)
    best: tuple[tuple[int, float, str], Compaction] | None = None
    for name, clique in layout.cliques.items():
        if not busy.get(name):
            continue
        inside = set(clique.nodes)
        pods = [p for p in running if p.node in inside and _holds_gpus(p)]
        if not pods or len(pods) > max_pods or any(not p.movable for p in pods):
            continue
        gangs = {p.gang for p in pods if p.gang}
        if any(q.node not in inside for g in gangs for q in by_gang[g]):
            continue  # a gang reaching outside the rack would leave pieces there
        units = evictable_units(
            pods, below=max(p.priority for p in pods) + 1, now=now, protections=protections
        )
        if units.protected or within_budgets(units.units, budgets)[1]:
            continue
        lost = sum(u.cost.gpu_seconds for u in units.units)
        gpus = sum(state[n].gpus_total for n in clique.nodes)
        if lost > settings.max_loss_ratio * gpus * settings.horizon_s:
            continue
        rank = (len(pods), lost, name)
        if best is not None and rank >= best[0]:
            continue
        placed = _relocate_rack(layout, name, pods, by_gang, free, busy, used, relocate)
        if placed is None:
            continue
        found = Compaction(
            node=name, moved=tuple(pods), destinations=placed, lost_gpu_seconds=lost, clique=True
        )
        best = (rank, found)
    return best[1] if best is not None else None


def _relocate_rack(
    layout: Layout,
    leaving: str,
    pods: Sequence[RunningPod],
    by_gang: Mapping[str, Sequence[RunningPod]],
    free: Mapping[str, int],
    busy: Mapping[str, int],
    used: Collection[str],
    relocate: RelocateFn,
) -> tuple[tuple[str, str], ...] | None:
    """Where the GPU pods of rack ``leaving`` go: each gang (largest first) whole into the
    tightest other rack in use that holds it, on nodes no gang moved before took; then the lone
    pods onto other nodes in use. ``None`` when one fits nowhere."""
    inside = set(layout.cliques[leaving].nodes)
    taken: set[str] = set()
    out: list[tuple[str, str]] = []
    gangs = sorted({p.gang for p in pods if p.gang}, key=lambda g: (-len(by_gang[g]), g))
    racks = sorted((free[c], c) for c in layout.cliques if c != leaving and busy.get(c))
    for gang in gangs:
        members = by_gang[gang]
        need = sum(p.requests.get(GPU, 0) for p in members)
        for room, rack in racks:
            if room < need:
                continue
            onto = {n for n in layout.cliques[rack].nodes if n not in taken}
            placed = relocate(members, (), onto=onto)
            if isinstance(placed, str):
                continue
            out.extend(placed)
            taken.update(node for _, node in placed)
            break
        else:
            return None
    lone = [p for p in pods if not p.gang]
    if lone:
        placed = relocate(lone, (), onto=set(used) - inside - taken)
        if isinstance(placed, str):
            return None
        out.extend(placed)
    return tuple(out)
