"""Preemption, executed: when a higher-priority pod or gang cannot fit, evict the fewest,
lowest-priority victims that make room (whole gangs as one victim), as the pure
:func:`~coordinator.core.preemption.victims.select_victims` picks them.

Executing a plan means: ``status.nominatedNodeName`` on every preemptor member (where it will go
once the room is free; written with the member's explanation, in one ``pods/status`` patch, by
:meth:`~coordinator.engine.loop.Scheduler.nominate`), a ``Preempted`` Event on every victim
naming the preemptor, a ``Preempting`` Event on the preemptor naming the victims, and an
eviction of every victim through the Eviction API (``pods/eviction``: the API server checks
PodDisruptionBudgets too — a ``429`` leaves the victim running, and the preemptor tries again
once its nomination expires).

A pod asking for part of a GPU preempts too: victims are chosen so that one GPU has room for its
share (:mod:`coordinator.core.preemption.shares`); a GPU fractional pods share is freed for a
whole-GPU pod only when all of its holders are victims.

Evicting a pod whose GPUs come from DRA claims frees the claims only victims reserve
(:mod:`coordinator.core.preemption.claims`). Their devices are free only once
kube-controller-manager's resourceclaim controller has taken the deleted victims out of
``reservedFor`` and cleared the allocation (or deleted a claim made for the pod): until then the
preemptor waits, as it waits for its victims to terminate.

While the victims of a nomination are terminating, the same preemptor does not preempt again,
and pods already being evicted are never picked as victims twice. The nominated room is held for
the preemptor meanwhile (:mod:`.nominations`): pods of equal or lower priority cannot take it
(a share's room on the GPU the plan frees room on).
A preemptor of higher priority that takes a node clears the nominations of lower-priority pods
there; a preemptor whose next preemption finds nothing to do loses its own.

Protections (:class:`~coordinator.core.preemption.protections.Protections`, from the config's
``gangs.protections`` and the pods' annotations; docs/preemption-protections.md):

* a running pod under its **minimum runtime** is no victim (nor is its gang); when only such pods
  would make room, the pending pod's message says so. "Now" for it is the wall clock
  (``wall_clock``), as the pods' ``status.startTime``;
* a pending pod (a gang: its longest member's) waits out its **preemption delay** from the first
  time it asked to preempt before it does (measured on ``clock``); :meth:`Preemptor.tick` sends
  it back to the queue when the delay is over;
* the **eviction budget** caps the pods evicted in any hour (on ``clock``); a plan that would
  exceed it waits, and its preemptor is tried again when enough of the hour has passed.

Pods of a workload Kueue admitted are never victims (:mod:`coordinator.core.preemption.queued`):
Kueue evicts workloads, Topos does not.

Defragmentation (``defrag``; docs/defragmentation.md): when preemption finds nothing to evict, a
pod or gang whose GPUs are free only scattered gets the moves of movable pods
:func:`~coordinator.core.preemption.defrag.plan_defrag` plans, executed as a preemption is
(``Moved`` Events on the moved pods, ``Defragmenting`` on the waiting members, the room held);
with ``background``, :meth:`Preemptor.tick` also compacts while nothing waits.
"""

from __future__ import annotations

import functools
import heapq
import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from coordinator.core.domains.capacity import GPU, NodeState, node_states
from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.packing import Member
from coordinator.core.domains.strategy import PlacementIntent
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Failure
from coordinator.core.gangs.cycle import members_of, node_gate
from coordinator.core.gangs.identity import GangKey
from coordinator.core.gangs.slices import slice_spec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.preemption.capacity import capacity_room
from coordinator.core.preemption.claims import ClaimHold, claim_holds
from coordinator.core.preemption.defrag import (
    DefragPlan,
    DefragPlanner,
    DefragSettings,
    movability,
    plan_compaction,
    plan_defrag,
)
from coordinator.core.preemption.interpod import interpod_check
from coordinator.core.preemption.protections import Protections, UnitCache, format_duration
from coordinator.core.preemption.queued import admitted_by_queue
from coordinator.core.preemption.relocate import RelocateFn, by_filters
from coordinator.core.preemption.shares import gpu_holders
from coordinator.core.preemption.victims import (
    DisruptionBudget,
    PreemptionPlan,
    RunningPod,
    select_victims,
)
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Code, Status
from coordinator.engine.gangs.running import (
    RunningByNode,
    RunningCache,
    bound_pods,
    recreated,
    restartable_jobs,
    running_pods,
)
from coordinator.engine.loop import Scheduler
from coordinator.engine.nominations import placement_group
from coordinator.engine.observer import Trigger
from coordinator.engine.ports import Nominate, PodRef
from coordinator.inventory.state import BoundPod

log = logging.getLogger(__name__)

__all__ = [
    "REASON_DEFRAGMENTING",
    "REASON_INVALID_MIN_RUNTIME",
    "REASON_MOVED",
    "REASON_NOT_MOVABLE",
    "REASON_PREEMPTED",
    "REASON_PREEMPTING",
    "Nominate",
    "Preemptor",
    "gang_eligible",
    "pod_eligible",
]

REASON_PREEMPTED: Final = "Preempted"
REASON_PREEMPTING: Final = "Preempting"
REASON_INVALID_MIN_RUNTIME: Final = "InvalidMinRuntime"
REASON_MOVED: Final = "Moved"
REASON_DEFRAGMENTING: Final = "Defragmenting"
REASON_NOT_MOVABLE: Final = "NotMovable"
HOUR_S: Final = 3600.0
#: A gang's reclaim holds the scheduler's other background writes from its evictions until its
#: members are handed to the binder, but no longer than this after its last eviction was
#: answered (victims that take their time to terminate do not hold every Event meanwhile).
HOLD_AFTER_EVICTIONS_S: Final = 3.0

PodGroups = Mapping[tuple[str, str], Mapping[str, Any]]


#: The running pods preemption or moves plan on, or how to read them when they are needed.
Candidates = Sequence[RunningPod] | Callable[[], Sequence[RunningPod]]


def _read(running: Candidates) -> Sequence[RunningPod]:
    return running() if callable(running) else running


@dataclass(slots=True)
class _Nomination:
    victims: frozenset[str]
    until: float
    plan: PreemptionPlan
    uids: frozenset[str]  # the preemptor pods it was made for (a pod recreated is a new one)
    claims: Mapping[str, frozenset[str]]  # claim it frees → the pod uids reserving it then
    note: str = ""  # what its preemptor was told: told again, unchanged, while the victims go
    holding: bool = False  # holds the scheduler's background writes (a gang's, until it binds)
    unanswered: int = 0  # its evictions not answered yet
    answered_at: float | None = None  # when the last was
    woken: bool = False  # its preemptor was sent back once its victims were gone


@dataclass(slots=True)
class _Waiting:
    """A preemptor waiting out its preemption delay (or the eviction budget)."""

    uids: frozenset[str]
    since: float  # when it first asked to preempt
    last: float  # when it last asked
    wake: float | None = None  # when to send it back to the queue


def _ref(pod: str) -> PodRef:
    ns, _, name = pod.partition("/")
    return PodRef(ns, name)


def gang_eligible(
    members: list[PodRequest], snapshot: Snapshot, framework: Framework
) -> Callable[[Member, NodeState], Status]:
    """Where a gang's members may be planned at all, by the core's node-level filters (GPU
    model, pool, taints): otherwise "room" on nodes they can never use looks like a plan."""
    gate = node_gate(framework)
    barred: dict[str, set[str]] = {}
    for m, planned in zip(members, members_of(members, snapshot), strict=True):
        shape = planned.shape_key
        if shape not in barred:
            probe = schedule_one(m, snapshot, gate)
            barred[shape] = {n for n, v in probe.verdicts.items() if not v.status.is_success}

    def eligible(member: Member, node: NodeState) -> Status:
        if node.name in barred.get(member.shape_key, ()):
            return Status.unresolvable("the pod can never run on this node")
        return Status()

    return eligible


def pod_eligible(failure: Failure) -> Callable[[Member, NodeState], Status]:
    """Where a lone pod may be planned: not on nodes that refused it for good."""
    hopeless = {
        node
        for node, status in failure.statuses.items()
        if status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    }

    def eligible(member: Member, node: NodeState) -> Status:
        if node.name in hopeless:
            return Status.unresolvable("the pod can never run on this node")
        return Status()

    return eligible


class Preemptor:
    """Event-loop only."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        podgroups: PodGroups,
        budgets: Callable[[], Sequence[DisruptionBudget]] = lambda: (),
        nominate: Nominate | None = None,
        keys: DomainKeys | None = None,
        nomination_ttl_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        protections: Protections | None = None,
        defrag: DefragSettings | None = None,
        jobs: Callable[[], Iterable[Mapping[str, Any]]] = lambda: (),
        mover: DefragPlanner = plan_defrag,
    ) -> None:
        self.scheduler = scheduler
        self.mover = mover  # plans defragmentation's moves (a baseline's, in coordinator.sim)
        self.jobs = jobs  # the Job objects now: whether a Job's pod may move
        self.defrag = defrag or DefragSettings(mode="off")
        self.moves = 0  # defragmentations executed
        self.moved = 0  # pods they moved
        self.freed_nodes = 0  # nodes they emptied of a moved pod for the waiting workload
        self.compactions = 0  # background compactions executed
        self.compacted = 0  # pods they moved (counted in ``moved`` too)
        self._compacted_at: deque[float] = deque()  # when each pod compaction moved was evicted
        # not before the inventory is synced
        self._next_compaction = clock() + self.defrag.interval_s
        self.podgroups = podgroups
        self._running = RunningCache()  # the running pods' conversions, kept between attempts
        self._by_node: RunningByNode | None = None  # and node by node (made on first use)
        # (inventory generation, the lowest priority of a running pod preemption may evict)
        self._lowest: tuple[int, int | None] = (-1, None)
        self._lowest_on: dict[str, tuple[tuple[BoundPod, ...], int | None]] = {}  # per node
        self._units = UnitCache()  # and their eviction units
        self.budgets = budgets
        self.nominate = nominate
        self.keys = keys
        self.nomination_ttl_s = nomination_ttl_s
        self._clock = clock
        self._wall = wall_clock
        self.protections = protections or Protections()
        self.waiting: dict[str, _Waiting] = {}  # preemptor unit → since when it waits to preempt
        self._evicted_at: deque[float] = deque()  # when each pod of the last hour was evicted
        self._reported: set[str] = set()  # pods whose bad topos.io/min-runtime was reported
        self.nominations: dict[str, _Nomination] = {}  # preemptor unit → what it evicted
        self.held = scheduler.nominations  # the room held for preemptors, by pod UID
        #: victim pod (its UID; its ``namespace/name`` where none is known) → until when it
        #: counts as leaving: a pod re-created under a victim's name is another pod, not leaving
        self.evicting: dict[str, float] = {}
        self._leaving: list[tuple[float, str]] = []  # (until, pod) of each eviction: a heap
        self._ending: list[tuple[float, int, str]] = []  # (until, id, unit) of nominations: a heap
        #: room held for gangs compaction moved (a reservation group → until when)
        self.reserved_for: dict[str, float] = {}
        #: Called after a pod's preemption was tried: :meth:`next_tick` may be sooner now.
        self.changed: Callable[[], None] = lambda: None
        self.preemptions = 0
        self.victims = 0

    # --- entry points ----------------------------------------------------------------------------

    async def for_gang(
        self, key: GangKey, members: list[PodRequest], *, intent: PlacementIntent | None
    ) -> str | None:
        """A gang that does not fit: preempt for all its unplaced members at once."""
        if not members:
            return None
        policy = (
            "Never"
            if any(m.preemption_policy == "Never" for m in members)
            else "PreemptLowerPriority"
        )
        # Members may only be planned where the core's node-level filters let them (GPU model,
        # pool, taints): otherwise "room" on nodes they can never use looks like a plan.
        snapshot = self.scheduler.view.snapshot()
        framework = self.scheduler.profiles.for_name(members[0].scheduler_name)
        eligible = gang_eligible(members, snapshot, framework)

        # The room is made for the gang's slices, as it would be placed (core/gangs/slices.py);
        # an exclusive slice still takes no domain where another workload runs.
        slices = slice_spec(
            members, snapshot, node_states(snapshot), keys=self.keys or DomainKeys()
        )
        if isinstance(slices, Status):
            return None  # the keys are wrong: no room helps
        if slices is not None:
            intent = replace(intent or PlacementIntent(), slices=slices)
        return await self._preempt(
            f"gang:{key}",
            members,
            priority=max(m.priority for m in members),
            policy=policy,
            intent=intent,
            eligible=eligible,
        )

    async def gather(
        self,
        key: GangKey,
        members: list[PodRequest],
        *,
        intent: PlacementIntent,
        split: str = "split over NVLink cliques",
    ) -> str | None:
        """A gang the planner would split over NVLink cliques: move movable pods (never
        preempt) so that it goes into one clique, if the cost model allows
        (:mod:`coordinator.core.preemption.gather`); what was done, or ``None`` (nothing moved:
        it is placed split). No preemption delay applies: the gang could run now. ``split``:
        how the gang would run otherwise, for the Events."""
        if not members or not self.defrag.gathers:
            return None
        if any(m.preemption_policy == "Never" for m in members):
            return None
        unit = f"gang:{key}"
        pending = self.nominations.get(unit)
        if pending is not None and not pending.uids.isdisjoint(m.uid for m in members):
            # Moved for already: wait for the moved pods, then take what the planner finds
            # (never move twice for one gang).
            left = self._victims_left(pending)
            return f"waiting for {len(left)} moved pod(s) to terminate" if left else None
        snapshot = self.scheduler.view.snapshot()
        framework = self.scheduler.profiles.for_name(members[0].scheduler_name)
        before = self.moves
        note = await self._preempt(
            unit,
            members,
            priority=max(m.priority for m in members),
            policy="PreemptLowerPriority",
            intent=intent,
            eligible=gang_eligible(members, snapshot, framework),
            moves_only=True,
            gathering=split,
        )
        return note if self.moves > before else None

    async def post_filter(
        self, pod: PodRequest, failure: Failure, snapshot: Snapshot
    ) -> str | None:
        """The runtime's post-filter hook for pods in no gang."""
        if pod.gang is not None or failure.unresolvable:
            return None
        try:
            return await self._preempt(
                pod.key,
                [pod],
                priority=pod.priority,
                policy=pod.preemption_policy,
                intent=None,
                eligible=pod_eligible(failure),
            )
        finally:
            self.changed()  # it may wait out a delay or its victims now: the ticker looks

    # --- the work --------------------------------------------------------------------------------

    def tick(self) -> None:
        """Send back to the queue the preemptors whose delay (or budget wait) is over."""
        now = self._clock()
        self._expire(now)  # a nomination (and its hold on the writes) never outlives its TTL
        due: set[str] = set()
        for unit, waiting in tuple(self.waiting.items()):
            if waiting.wake is not None and waiting.wake <= now:
                waiting.wake = None
                due |= waiting.uids
            elif waiting.wake is None and now - waiting.last > self._forget_after_s():
                del self.waiting[unit]  # it stopped asking: placed, deleted, or gave up
        if due:
            self.scheduler.queue.cluster_changed(lambda p: p.uid in due)
        # A preemptor whose victims are all gone goes back at once, not after its backoff: the
        # room it waits for is free and held for it (a 500-member gang would otherwise wait up
        # to the queue's 10 s cap after the last victim went).
        freed: set[str] = set()
        for nom in self.nominations.values():
            if not nom.woken and not self._victims_left(nom):
                nom.woken = True
                freed |= nom.uids
        if freed:
            self.scheduler.queue.cluster_changed(lambda p: p.uid in freed, at_once=True)
        for nom in self.nominations.values():
            if nom.answered_at is not None and now - nom.answered_at > HOLD_AFTER_EVICTIONS_S:
                self._let_go(nom)
        if self.defrag.mode == "background" and now >= self._next_compaction:
            if self._being_tried():
                # Pods just arrived (or sent back by a change) are tried first: compaction looks
                # once they are placed or wait (a replay's arrivals at the very second a
                # compaction is due refused it every time).
                return
            self._next_compaction = now + self.defrag.interval_s
            self.compact(now)

    def _being_tried(self) -> bool:
        """Pods in the scheduler's active queue or being scheduled now."""
        return any(p.where in ("active", "in_flight") for p in self.scheduler.queue.entries())

    def next_tick(self) -> float | None:
        """When :meth:`tick` next has work of its own (the clock's time; now or earlier: at the
        next tick), ``None``: only a change can give it some (:attr:`changed`, or an inventory
        event while a nomination's victims leave)."""
        if self.nominations:
            return self._clock()  # victims leaving, evictions answered: looked at every tick
        dues = [
            w.wake if w.wake is not None else w.last + self._forget_after_s()
            for w in self.waiting.values()
        ]
        dues.extend(self.reserved_for.values())
        if self._leaving:
            dues.append(self._leaving[0][0])
        if self._ending:
            dues.append(self._ending[0][0])
        if self.defrag.mode == "background":
            dues.append(self._next_compaction)
        return min(dues, default=None)

    def preempting(self, key: GangKey, members: Collection[PodRequest]) -> str | None:
        """While the victims evicted for this gang (these members) are leaving: what it waits
        for, the words it was told when they were evicted (the gang is not planned again
        meanwhile: its room is held and comes when they are gone); else ``None``."""
        pending = self.nominations.get(f"gang:{key}")
        if (
            pending is None
            or pending.until <= self._clock()
            or pending.uids.isdisjoint(m.uid for m in members)
        ):
            return None
        return self._waiting_for(pending)

    def _waiting_for(self, nom: _Nomination) -> str | None:
        """What a preemptor whose victims were evicted waits for: the victims to go (its words
        unchanged meanwhile, so that its members are not told again at each victim's going),
        then the victims' ResourceClaims to be released; ``None``: nothing."""
        if self._victims_left(nom):
            return nom.note or f"waiting for {len(nom.victims)} preempted pod(s) to terminate"
        releasing = self._claims_held(nom)
        if releasing:
            return (
                f"waiting for {len(releasing)} ResourceClaim(s) of preempted pods to be "
                "released: " + ", ".join(releasing)
            )
        return None

    def _victims_left(self, nom: _Nomination) -> set[str]:
        """The victims of ``nom`` still bound (terminating or not) on their nodes."""
        inventory = self.scheduler.inventory
        return {
            key
            for node in {n for group in nom.plan.victims for n in group.nodes}
            for p in inventory.bound_pods(node)
            if (key := f"{p.namespace}/{p.name}") in nom.victims
        }

    def compact(self, now: float) -> str | None:
        """``background``: while nothing waits and no earlier move is still leaving, empty one
        node by moving its movable pods onto nodes in use, within the hourly budget of moves;
        returns what it did."""
        self._expire(now)
        if self.scheduler.queue.pending or self.evicting:
            return None
        while self._compacted_at and self._compacted_at[0] <= now - HOUR_S:
            self._compacted_at.popleft()
        room = self.defrag.evictions_per_hour - len(self._compacted_at)
        if room <= 0:
            return None
        view = self.scheduler.view.snapshot()
        running = self._candidates(now)
        self._refuse_marks()
        self.scheduler.observer.defragmentation_attempted("compaction")
        found = plan_compaction(
            node_states(self.held.overlay(view, -(2**31), frozenset())),
            running,
            max_pods=room,
            settings=self.defrag,
            budgets=list(self.budgets()),
            now=self._wall(),
            protections=self.protections,
            relocate=self._relocate(view, -(2**31)),
            keys=self.keys,
        )
        if found is None:
            return None
        self.compactions += 1
        self.moved += len(found.moved)
        self.compacted += len(found.moved)
        self.scheduler.observer.moved("compaction", len(found.moved))
        text = found.describe()
        log.info("%s", text)
        until = now + self.nomination_ttl_s
        elsewhere = dict(found.destinations)
        self._hold_for_gangs(found.moved, elsewhere, until)
        for pod in found.moved:
            self._compacted_at.append(now)
            why = f"Moved by background compaction: {text}; its controller recreates it"
            why += f" (it fits on {elsewhere[pod.key]})"
            self._evict(pod.key, {pod.key: pod.uid}, until, why, reason=REASON_MOVED)
        return text

    def _hold_for_gangs(
        self, moved: Sequence[RunningPod], where: Mapping[str, str], until: float
    ) -> None:
        """The trays a moved gang is to go to are held for its recreated pods (a reservation
        of its group: nothing of equal or lower priority takes them meanwhile) until they bind
        or ``until``. Lone moved pods hold nothing: any node in use suits them."""
        bound = {f"{p.namespace}/{p.name}": p for p in bound_pods(self.scheduler.inventory)}
        entries: dict[str, list[tuple[PodRequest, str]]] = {}
        for pod in moved:
            kept = bound.get(pod.key)
            request = recreated(kept) if pod.gang is not None and kept is not None else None
            group = placement_group(request) if request is not None else None
            if request is not None and group is not None and pod.key in where:
                entries.setdefault(group, []).append((request, where[pod.key]))
        for group, pods in entries.items():
            self.held.reserve(group, pods)
            self.reserved_for[group] = until

    def _forget_after_s(self) -> float:
        rule = self.protections.preemption_delay
        longest = max([rule.default_s, *rule.priority_classes.values(), *rule.namespaces.values()])
        return longest + HOUR_S

    def _delay_left(self, unit: str, members: Collection[PodRequest], now: float) -> float:
        """Seconds ``unit`` still waits before it may preempt (0: it may now)."""
        rule = self.protections.preemption_delay
        delay = max(
            rule.for_pod(m.namespace, m.priority_class_name, m.preemption_delay_s) for m in members
        )
        if delay <= 0:
            return 0.0
        waiting = self._asking(unit, members, now)
        left = waiting.since + delay - now
        if left > 0:
            waiting.wake = waiting.since + delay
        return max(0.0, left)

    def _asking(self, unit: str, members: Collection[PodRequest], now: float) -> _Waiting:
        """The record of ``unit`` asking to preempt (a new one for pods of its name that are
        new)."""
        uids = frozenset(m.uid for m in members)
        waiting = self.waiting.get(unit)
        if waiting is None or waiting.uids.isdisjoint(uids):
            waiting = self.waiting[unit] = _Waiting(uids, now, now)
        waiting.uids, waiting.last = uids, now
        return waiting

    def _budget_wait(self, victims: int, now: float) -> float:
        """Seconds until evicting ``victims`` more pods stays within the hourly budget."""
        budget = self.protections.evictions_per_hour
        while self._evicted_at and self._evicted_at[0] <= now - HOUR_S:
            self._evicted_at.popleft()
        if budget <= 0:
            return 0.0
        if victims > budget:
            return float("inf")
        over = len(self._evicted_at) + victims - budget
        if over <= 0:
            return 0.0
        return self._evicted_at[over - 1] + HOUR_S - now

    def _expire(self, now: float) -> None:
        while self._leaving and self._leaving[0][0] <= now:
            until, pod = heapq.heappop(self._leaving)
            if self.evicting.get(pod) == until:  # not evicted again since, for longer
                del self.evicting[pod]
        while self._ending and self._ending[0][0] <= now:
            _, ident, unit = heapq.heappop(self._ending)
            nom = self.nominations.get(unit)
            if nom is not None and id(nom) == ident and nom.until <= now:
                self._drop(unit)
        if self.reserved_for:
            live = self.held.groups()
            for group, until in tuple(self.reserved_for.items()):
                if group not in live:
                    del self.reserved_for[group]  # every entry taken: the gang bound
                elif until <= now:
                    del self.reserved_for[group]
                    self.held.release(group)

    def _drop(self, unit: str) -> None:
        nom = self.nominations.pop(unit, None)
        if nom is not None:
            self._let_go(nom)

    def _let_go(self, nom: _Nomination) -> None:
        if nom.holding:
            nom.holding = False
            self.scheduler.release_writes()

    def binding(self, key: GangKey) -> None:
        """The gang's members are handed to the binder (their binds hold the background writes
        themselves from now on): its reclaim's hold ends."""
        nom = self.nominations.get(f"gang:{key}")
        if nom is not None:
            self._let_go(nom)

    async def _preempt(
        self,
        unit: str,
        members: list[PodRequest],
        *,
        priority: int,
        policy: str,
        intent: PlacementIntent | None,
        eligible: Callable[[Member, NodeState], Status] | None = None,
        moves_only: bool = False,
        gathering: str | None = None,
    ) -> str | None:
        """``moves_only``: defragmentation's moves, never preemption, no delay, no waiting for
        the eviction budget (:meth:`gather`, which says in ``gathering`` how the gang would run
        otherwise)."""
        now = self._clock()
        self._expire(now)
        inventory = self.scheduler.inventory
        uids = frozenset(m.uid for m in members)
        mine = {node for m in members if (node := self.held.node_of(m.uid)) is not None}
        waiting_for = sum(  # lower-priority pods terminating on its nominated nodes
            1
            for node in mine
            for p in inventory.bound_pods(node)
            if p.terminating and p.priority < priority
        )
        pending = self.nominations.get(unit)
        if pending is not None and pending.uids.isdisjoint(uids):
            self._drop(unit)  # made for pods of the same name that are gone
            pending = None
        if pending is not None:
            waiting = self._waiting_for(pending)
            if waiting:
                return waiting
            self._drop(unit)  # its victims are gone and it still does not fit
        if waiting_for:
            # Nominated where lower-priority pods are still terminating (after a restart, too):
            # their room is coming; preempting again would only evict more (as kube-scheduler).
            return f"waiting for {waiting_for} preempted pod(s) to terminate"
        if policy == "Never":
            return None
        observer = self.scheduler.observer
        if not moves_only:  # gathering moves pods for a gang that could run: no preemption
            observer.preemption_attempted()
        lowest = self._lowest_priority()
        lower = (
            lowest is not None
            and lowest < priority
            and any(  # is any pod it may evict (lower priority, not leaving) running?
                p.priority < priority
                and (p.uid or f"{p.namespace}/{p.name}") not in self.evicting
                and not admitted_by_queue(p.labels)
                for p in bound_pods(inventory)
            )
        )
        if not lower and not self.defrag.enabled:
            # select_victims would find no candidate (victims must have lower priority), and
            # that outcome is "no preemption": skip building every running pod's gang for it.
            self._release(members)
            return None
        delay = 0.0 if moves_only else self._delay_left(unit, members, now)  # from its first ask
        problems: dict[str, tuple[str, str]] = {}
        plan, view, nodes, running = self._select(
            members,
            priority=priority,
            policy=policy,
            intent=intent,
            eligible=eligible,
            now=now,
            problems=problems,
            # no pod it may evict: no victims to plan (only moves, which any priority may make)
            victims=lower and not moves_only,
        )
        self._report(problems)
        moves: DefragPlan | None = None
        trigger: Trigger = "gather" if moves_only else "waiting"
        if self.defrag.enabled and (isinstance(plan, Status) or not plan.victims):
            # Preemption cannot help: would moving movable pods elsewhere (defragmentation)?
            observer.defragmentation_attempted(trigger)
            moving = self._select_moves(
                members,
                view=view,
                nodes=nodes,
                running=running,
                priority=priority,
                intent=intent,
                eligible=eligible,
            )
            if isinstance(moving, DefragPlan):
                moves, plan = moving, moving.plan
            elif (not isinstance(plan, Status) or not _says_why(plan)) and _worth_telling(moving):
                self._release(members)
                return f"defragmentation: {moving.message}"
        if isinstance(plan, Status):
            self._release(members)
            if _says_why(plan):
                return f"preemption: {plan.message}"
            return None
        if not plan.victims:
            self._release(members)
            return None  # nothing to evict would help: no preemption, no nomination
        if delay > 0:
            victims = len(plan.victim_pods)
            return (
                f"preemption waits {format_duration(delay)} more before evicting {victims} "
                f"pod{'s' if victims != 1 else ''} (preemption delay: room may come without "
                "evicting anyone)"
            )
        wait = self._budget_wait(len(plan.victim_pods), now)
        if wait > 0 and moves_only:
            self._release(members)
            return None
        if wait > 0:
            self._release(members)
            budget = self.protections.evictions_per_hour
            if wait == float("inf"):
                return (
                    f"preemption would evict {len(plan.victim_pods)} pods, more than the "
                    f"eviction budget of {budget} per hour"
                )
            self._asking(unit, members, now).wake = now + wait
            return (
                f"preemption waits {format_duration(wait)} for the eviction budget "
                f"({len(self._evicted_at)} of {budget} evictions in the last hour)"
            )
        self.waiting.pop(unit, None)
        claims = {
            key: frozenset(found.reserved_for)
            for key in plan.claims
            if (found := view.dra.claim_by_key.get(key)) is not None
        }
        uids_of = {p.key: p.uid for p in _read(running)}
        note = self._execute(
            unit, members, priority, plan, now, claims, uids_of, moves=moves, gathering=gathering
        )
        if moves is not None:
            observer.moved(trigger, len(plan.victim_pods))
        return note

    def plan(
        self,
        members: list[PodRequest],
        *,
        priority: int,
        policy: str,
        intent: PlacementIntent | None,
        eligible: Callable[[Member, NodeState], Status] | None = None,
        snapshot: Snapshot | None = None,
    ) -> PreemptionPlan | Status:
        """The victims preemption would choose for ``members`` now, changing nothing (what-if:
        no eviction, nomination, metric or expiry). ``snapshot``: plan on this one instead of the
        scheduler's (the what-if's copy)."""
        plan, _, _, _ = self._select(
            members,
            priority=priority,
            policy=policy,
            intent=intent,
            eligible=eligible,
            now=self._clock(),
            snapshot=snapshot,
        )
        return plan

    def _select(
        self,
        members: list[PodRequest],
        *,
        priority: int,
        policy: str,
        intent: PlacementIntent | None,
        eligible: Callable[[Member, NodeState], Status] | None,
        now: float,
        snapshot: Snapshot | None = None,
        problems: dict[str, tuple[str, str]] | None = None,
        victims: bool = True,
    ) -> tuple[PreemptionPlan | Status, Snapshot, list[NodeState], Candidates]:
        """:func:`select_victims` over the cluster now (read only), with the view, the nodes and
        the candidates it planned on (or how to read them); ``problems`` gains the running pods
        whose ``topos.io/min-runtime`` does not parse. ``victims=False``: no preemption is planned
        (the plan is a ``Status``), only the rest is read."""
        uids = frozenset(m.uid for m in members)
        # Room held for other preemptors at or above this priority is not this one's to plan on.
        view = snapshot if snapshot is not None else self.scheduler.view.snapshot()
        overlay = self.held.overlay(view, priority, uids)
        nodes = node_states(overlay)
        # A pod in no gang gets its victims node by node, as kube does, its topology spread and
        # inter-pod affinity re-checked with them gone (core/preemption/interpod.py).
        lone = members[0] if len(members) == 1 and members[0].gang is None else None
        index = self._index() if lone is not None and victims else None
        if index is not None and index.plain:
            # ... reading only the candidates of the nodes it visits (no pod names a gang); all
            # of them only when no node can be made to fit (to say why, or to plan moves).
            if problems is not None:
                problems.update(index.problems())
            every = functools.cache(lambda: self._candidates(now))
            plan = self._plan_victims(
                members,
                view,
                overlay,
                nodes,
                every,
                priority=priority,
                policy=policy,
                intent=intent,
                eligible=eligible,
                lone=lone,
                on_node=lambda name: [
                    p for p in index.on(name) if self.evicting.get(p.uid or p.key, 0.0) <= now
                ],
            )
            if isinstance(plan, PreemptionPlan) and plan.victims:
                near = sorted({n for v in plan.victims for n in v.nodes})
                return plan, view, nodes, [p for n in near for p in index.on(n)]
            # Moves read every candidate only once they may help (a pod asking GPUs that are
            # free, scattered): built lazily, not at each failed attempt of a pod asking none.
            return plan, view, nodes, every if self.defrag.enabled else []
        if not victims:
            # Only moves may be planned: the candidates are read once a move may help (a pod
            # asking GPUs that are free, scattered), not at each failed attempt of a pod that
            # asks none.
            @functools.cache
            def moves_read() -> list[RunningPod]:
                running = self._candidates(now, problems)
                if problems:
                    self._report(problems)  # read after the caller's report
                return running

            return Status.unschedulable("no preemption planned"), view, nodes, moves_read
        running = self._candidates(now, problems)
        plan = self._plan_victims(
            members,
            view,
            overlay,
            nodes,
            running,
            priority=priority,
            policy=policy,
            intent=intent,
            eligible=eligible,
            lone=lone,
        )
        return plan, view, nodes, running

    def _lowest_priority(self) -> int | None:
        """The lowest priority of the running pods preemption may evict (not Kueue's), read
        once per inventory generation: a failed attempt in a cluster of one priority asks
        without walking every running pod."""
        inventory = self.scheduler.inventory
        if self._lowest[0] != inventory.generation:
            lowest: int | None = None
            per_node = self._lowest_on
            for name in inventory.names():
                pods = inventory.bound_pods(name)  # the same tuple while the node is unchanged
                known = per_node.get(name)
                if known is None or known[0] is not pods:
                    low = min(
                        (p.priority for p in pods if not admitted_by_queue(p.labels)),
                        default=None,
                    )
                    known = per_node[name] = (pods, low)
                if known[1] is not None and (lowest is None or known[1] < lowest):
                    lowest = known[1]
            if len(per_node) > 2 * len(inventory):
                live = set(inventory.names())
                for gone in [n for n in per_node if n not in live]:
                    del per_node[gone]
            self._lowest = (inventory.generation, lowest)
        return self._lowest[1]

    def _index(self) -> RunningByNode:
        if self._by_node is None:
            self._by_node = RunningByNode(
                self.scheduler.inventory, keep=lambda p: not admitted_by_queue(p.labels)
            )
        return self._by_node

    def _plan_victims(
        self,
        members: list[PodRequest],
        view: Snapshot,
        overlay: Snapshot,
        nodes: list[NodeState],
        running: Sequence[RunningPod] | Callable[[], Sequence[RunningPod]],
        *,
        priority: int,
        policy: str,
        intent: PlacementIntent | None,
        eligible: Callable[[Member, NodeState], Status] | None,
        lone: PodRequest | None,
        on_node: Callable[[str], Sequence[RunningPod]] | None = None,
    ) -> PreemptionPlan | Status:
        """:func:`select_victims` on what :meth:`_select` read."""
        holds = self._holds(view)
        shares = {m.key: m.share for m in members if m.share is not None}
        recheck = (
            interpod_check(lone, overlay, self.scheduler.profiles.for_name(lone.scheduler_name))
            if lone is not None
            else None
        )
        plan = select_victims(
            members_of(members, view),
            priority=priority,
            nodes=nodes,
            running=running,
            budgets=list(self.budgets()),
            preemption_policy=policy,
            intent=self._bounded(intent),
            keys=self.keys,
            eligible=eligible,
            claims=holds,
            shares=shares,
            gpus=list(gpu_holders(overlay, every_gpu=bool(shares))),
            capacity=capacity_room(view, members),
            now=self._wall(),
            protections=self.protections,
            recheck=recheck,
            units=self._units,
            on_node=on_node,
        )
        return plan

    def _select_moves(
        self,
        members: list[PodRequest],
        *,
        view: Snapshot,
        nodes: Sequence[NodeState],
        running: Candidates,
        priority: int,
        intent: PlacementIntent | None,
        eligible: Callable[[Member, NodeState], Status] | None,
    ) -> DefragPlan | Status:
        """:func:`plan_defrag` on what :meth:`_select` planned on (read only); a bare pod marked
        movable gets its ``NotMovable`` Event (once)."""
        if not any(m.requests.get(GPU, 0) or m.claims or m.share for m in members):
            asked: list[Member] = []  # asks no GPU: no move helps (plan_defrag says so)
        else:
            asked = members_of(members, view)
        need = sum(m.requests.get(GPU, 0) for m in asked)
        if need == 0 or sum(n.gpus_free for n in nodes if n.schedulable) < need:
            # Not scattered GPUs: no move helps (plan_defrag says so), nobody is told of marks.
            return plan_defrag(
                asked, priority=priority, nodes=nodes, running=(), settings=self.defrag
            )
        self._refuse_marks()
        return self.mover(
            asked,
            priority=priority,
            nodes=nodes,
            running=_read(running),
            settings=self.defrag,
            budgets=list(self.budgets()),
            intent=self._bounded(intent),
            keys=self.keys,
            eligible=eligible,
            now=self._wall(),
            protections=self.protections,
            relocate=self._relocate(view, priority, members),
        )

    def _relocate(
        self, view: Snapshot, priority: int, members: Sequence[PodRequest] = ()
    ) -> RelocateFn:
        """Where moved pods would go: through the scheduling framework's filters, on ``view``
        with the room held for others at or above ``priority`` (as the recreated pods, of no
        higher priority, will find it), the moves made and ``members`` on their nodes."""
        uids = frozenset(m.uid for m in members)
        by_key = {f"{p.namespace}/{p.name}": p for p in bound_pods(self.scheduler.inventory)}

        def spec_of(pod: RunningPod) -> PodRequest | None:
            bound = by_key.get(pod.key)
            return recreated(bound) if bound is not None else None

        return by_filters(
            self.held.overlay(view, priority, uids),
            self.scheduler.framework,
            spec_of=spec_of,
            members={m.key: m for m in members},
        )

    def _candidates(
        self, now: float, problems: dict[str, tuple[str, str]] | None = None
    ) -> list[RunningPod]:
        """The running pods preemption may evict and defragmentation may move: not already
        leaving, and not Kueue's (core/preemption/queued.py: Kueue evicts workloads, Topos does
        not). ``problems``: as :func:`running_pods`'."""
        leaving = {pod for pod, until in self.evicting.items() if until > now}
        inventory = self.scheduler.inventory
        restartable = (
            restartable_jobs(bound_pods(inventory), self.jobs()) if self.defrag.enabled else ()
        )
        return [
            p
            for p in running_pods(
                inventory,
                self.podgroups,
                problems=problems,
                restartable=restartable,
                cache=self._running,
            )
            if (p.uid or p.key) not in leaving and not admitted_by_queue(p.labels)
        ]

    def _bounded(self, intent: PlacementIntent | None) -> PlacementIntent:
        """``intent`` under the config's topologyConstraints: they bound the placement victims
        or moves make room for, as they bound the gang's own (core/gangs/cycle.py)."""
        return replace(
            intent or PlacementIntent(),
            leaf_limits=self.scheduler.framework.config.topology_constraints,
        )

    def _refuse_marks(self) -> None:
        """A Warning Event, once per pod, on each bare pod marked movable."""
        for p in bound_pods(self.scheduler.inventory):
            why = movability(p.owner_kind, p.annotations)
            if not isinstance(why, str) or p.uid in self._reported:
                continue
            uid, key = p.uid, f"{p.namespace}/{p.name}"
            self._reported.add(uid)
            log.warning("pod %s: %s", key, why)
            self.scheduler.write(
                self.scheduler.writer.event(
                    replace(_ref(key), uid=uid),
                    reason=REASON_NOT_MOVABLE,
                    message=why,
                    event_type="Warning",
                ),
                f"not movable: {key}",
            )

    def _execute(
        self,
        unit: str,
        members: Collection[PodRequest],
        priority: int,
        plan: PreemptionPlan,
        now: float,
        claims: Mapping[str, frozenset[str]],
        victim_uids: Mapping[str, str],
        *,
        moves: DefragPlan | None = None,
        gathering: str | None = None,
    ) -> str:
        """Evict ``plan``'s victims (``moves``: move them), nominate and tell; what the
        preemptor is told (and told again, unchanged, while its victims go). ``gathering``: the
        moves gather a gang into one NVLink clique, and how it would run otherwise."""
        if moves is not None:
            self.moves += 1
            self.moved += len(plan.victim_pods)
            emptied = {n for group in plan.victims for n in group.nodes}
            self.freed_nodes += len(emptied & {n for _, n in plan.nominated})
        else:
            self.preemptions += 1
            self.victims += len(plan.victim_pods)
            self.scheduler.observer.preempted(len(plan.victim_pods))
        self._evicted_at.extend(now for _ in plan.victim_pods)  # moves spend the budget too
        until = now + self.nomination_ttl_s
        uids = frozenset(m.uid for m in members)
        text = plan.describe(unit) if moves is None else moves.describe(unit)
        nodes = ", ".join(sorted({n for _, n in plan.nominated}))
        gather = ""
        if moves is not None and gathering is not None:
            gather = f"gathering it inside {self._cliques(plan)} rather than {gathering}"
            text += f"; {gather}"
        victims = len(plan.victim_pods)
        note = text
        if moves is None:
            note = f"preempting {victims} lower-priority pod{'s' if victims != 1 else ''}: {text}"
        self._drop(unit)
        nom = _Nomination(frozenset(plan.victim_pods), until, plan, uids, claims, note)
        nom.unanswered = len(plan.victim_pods)
        self.nominations[unit] = nom
        heapq.heappush(self._ending, (until, id(nom), unit))
        if unit.startswith("gang:"):
            # From its evictions until its members are handed to the binder, Events and
            # explanations wait: a gang reclaiming room binds as soon as the room is free, not
            # behind the writes its own preemption queued (Preempting, nominations, conditions).
            nom.holding = True
            self.scheduler.hold_writes()
        log.info("%s", text)
        writer = self.scheduler.writer
        elsewhere = dict(moves.destinations) if moves is not None else {}
        for group in plan.victims:
            if moves is None:
                why = f"Preempted by {unit} (priority {priority}) to make room on {nodes}: "
                why += f"its priority {group.priority} is lower"
            elif gather:
                why = f"Moved to make room for {unit} (priority {priority}) on {nodes}: "
                why += f"{gather}; its controller recreates it"
            else:
                why = f"Moved to make room for {unit} (priority {priority}) on {nodes}: "
                why += "free GPUs there are scattered; its controller recreates it"
            if group.gang:
                why += f"; its gang {group.unit.removeprefix('gang:')} is evicted whole"
                why += f" ({len(group.pods)} pods)"
            for victim in group.pods:
                message = why
                if victim in elsewhere:
                    message += f" (it fits on {elsewhere[victim]})"
                reason = REASON_PREEMPTED if moves is None else REASON_MOVED
                self._evict(victim, victim_uids, until, message, reason=reason, nomination=nom)
        # Lower-priority pods nominated where this one goes lose that room (kube-scheduler too).
        taken = {n for _, n in plan.nominated}
        for other in self.held.lower_on(taken, priority):
            if other.uid not in uids:
                self._unnominate(other.uid, replace(_ref(other.key), uid=other.uid))
        by_key = {m.key: m for m in members}
        gpus = dict(plan.share_gpus)
        for member, node in plan.nominated:
            request = by_key.get(member)
            ref = PodRef(request.namespace, request.name, request.uid) if request else _ref(member)
            if request is not None:
                # held from now on, before the API shows it (a share on the GPU it frees room on)
                self.held.nominate(request, node, gpu=gpus.get(member))
            reason = REASON_PREEMPTING if moves is None else REASON_DEFRAGMENTING
            self.scheduler.write(
                writer.event(ref, reason=reason, message=text), f"{reason} for {member}"
            )
            if self.nominate is not None:
                # with the evictions: where the preemptor goes is said while its victims go (with
                # its explanation, in one write, when the attempt explains it)
                self.scheduler.nominate(ref, node, self.nominate)
        return note

    def _cliques(self, plan: PreemptionPlan) -> str:
        """The NVLink clique(s) of the nodes ``plan`` makes room on, as Events name them."""
        label = (self.keys or DomainKeys()).clique
        view = self.scheduler.view.snapshot()
        found = sorted(
            {
                c
                for _, n in plan.nominated
                if (c := (view.labels_of(n) or {}).get(label)) is not None
            }
        )
        if not found:
            return "one NVLink clique"
        return f"NVLink clique {', '.join(found)}"

    def _evict(
        self,
        victim: str,
        uids: Mapping[str, str],
        until: float,
        message: str,
        *,
        reason: str = REASON_PREEMPTED,
        nomination: _Nomination | None = None,
    ) -> None:
        leaving = uids.get(victim) or victim
        self.evicting[leaving] = until
        heapq.heappush(self._leaving, (until, leaving))
        ref = replace(_ref(victim), uid=uids.get(victim, ""))
        writer = self.scheduler.writer

        async def evict() -> None:
            # The eviction first (kube-scheduler deletes, then records the Event): the room is
            # what the preemptor waits for, and a victim the API server kept (a
            # PodDisruptionBudget's 429) is told nothing false.
            try:
                await writer.evict(ref)
            finally:
                if nomination is not None:
                    nomination.unanswered -= 1
                    if nomination.unanswered <= 0:
                        nomination.answered_at = self._clock()
            event = writer.event(ref, reason=reason, message=message, event_type="Warning")
            self.scheduler.write(event, f"{reason} event on {victim}")

        self.scheduler.write(evict(), f"preempt {victim}", urgent=True)

    def _report(self, problems: Mapping[str, tuple[str, str]]) -> None:
        """A Warning Event, once per pod, on each running pod whose minimum runtime is bad."""
        for uid, (key, why) in problems.items():
            if uid in self._reported:
                continue
            self._reported.add(uid)
            ref = replace(_ref(key), uid=uid)
            message = f"{why}; the configured minimum runtime applies instead"
            log.warning("pod %s: %s", key, message)
            self.scheduler.write(
                self.scheduler.writer.event(
                    ref, reason=REASON_INVALID_MIN_RUNTIME, message=message, event_type="Warning"
                ),
                f"bad min-runtime of {key}",
            )

    def _holds(self, view: Snapshot) -> list[ClaimHold]:
        """The allocated claims holding GPUs, with the running pods reserving them."""
        if view.dra.empty or not view.dra.held:
            return []
        by_uid = {p.uid: f"{p.namespace}/{p.name}" for p in bound_pods(self.scheduler.inventory)}
        return claim_holds(view.dra, {n.name: n.labels for n in view.nodes}, by_uid)

    def _claims_held(self, nomination: _Nomination) -> list[str]:
        """Claims the nomination's victims freed that are still allocated to them (the
        resourceclaim controller has not released them yet)."""
        if not nomination.claims:
            return []
        dra = self.scheduler.view.snapshot().dra
        out = []
        for key, users in sorted(nomination.claims.items()):
            found = dra.claim_by_key.get(key)
            # Still allocated, and nobody new reserves it: the victims' still.
            if (
                found is not None
                and found.allocation is not None
                and set(found.reserved_for) <= users
            ):
                out.append(key)
        return out

    def _release(self, members: Collection[PodRequest]) -> None:
        """Preemption found nothing to do: the members' nominations end (kube clears them)."""
        for m in members:
            if self.held.node_of(m.uid) is not None:
                self._unnominate(m.uid, PodRef(m.namespace, m.name, m.uid))

    def _unnominate(self, uid: str, ref: PodRef) -> None:
        self.held.drop(uid)
        if self.nominate is not None:
            self.scheduler.write(self.nominate(ref, ""), f"clear nomination of {ref.key}")


def _says_why(status: Status) -> bool:
    """A refusal worth telling the waiting pod: only protected pods would make room."""
    return "PodDisruptionBudget" in status.message or "minimum runtime" in status.message


def _worth_telling(status: Status) -> bool:
    """A defragmentation refusal that names what stopped it (protections, the cost model), not
    one where moving could never help (too few GPUs in all, no room for the moved pods)."""
    return _says_why(status) or "would lose" in status.detail
