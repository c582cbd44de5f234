"""A gang after its members were handed to the binder: bind outcomes, completion, releases and
evictions, timeouts and their backoff, gangs a crash left partly bound, recovery bookkeeping.

:class:`GangLifecycle` holds the gang step's state; :class:`~.step.GangStep` adds admission (the
whole-gang plan) on top. Bind outcomes come back through a bind listener: a member that cannot
bind abandons the whole attempt (members already bound are evicted, so no gang is left partly
running). A timer (:meth:`GangLifecycle.tick`) expires gangs past their timeout and forgets pods
that are gone; at start-up, gangs a crash left partly bound get one attempt to complete, else
their bound members are evicted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Protocol

from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.strategy import PlacementIntent
from coordinator.core.framework.results import Failure
from coordinator.core.gangs.cycle import GangPlanner, schedule_gang
from coordinator.core.gangs.identity import GangKey
from coordinator.core.gangs.manager import GangManager, Phase, Reject
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.queue import QueuedPod
from coordinator.core.status import Status
from coordinator.engine.binder import BindJob
from coordinator.engine.gangs.membership import GangMembership, PodGroups
from coordinator.engine.loop import Scheduler
from coordinator.engine.ports import ClusterError, PodRef

log = logging.getLogger(__name__)

__all__ = [
    "REASON_GANG_KEPT",
    "REASON_GANG_RELEASED",
    "REASON_GANG_SCHEDULED",
    "REASON_GANG_TIMEOUT",
    "GangLifecycle",
    "GangPreemption",
    "GangStepStats",
    "RecoveryRecord",
]

REASON_GANG_TIMEOUT: Final = "GangTimeout"
REASON_GANG_RELEASED: Final = "GangReleased"
REASON_GANG_SCHEDULED: Final = "GangScheduled"
REASON_GANG_KEPT: Final = "GangMemberKept"


class GangPreemption(Protocol):
    """What the gang step asks of preemption when a gang does not fit (``preempt.Preemptor``)."""

    async def for_gang(
        self,
        key: GangKey,
        members: list[PodRequest],
        *,
        intent: PlacementIntent | None,
    ) -> str | None: ...

    def preempting(self, key: GangKey, members: list[PodRequest]) -> str | None:
        """While the victims evicted for the gang are leaving: what it waits for (the gang is
        not planned again meanwhile); ``None`` otherwise."""
        ...

    def binding(self, key: GangKey) -> None:
        """The gang's members were handed to the binder."""
        ...

    async def gather(
        self, key: GangKey, members: list[PodRequest], *, intent: PlacementIntent, split: str
    ) -> str | None:
        """Moves (defragmentation only) that let a gang the planner would split over NVLink
        cliques into one (``intent``: :func:`~coordinator.core.preemption.gather.gather_intent`;
        ``split``: how it would run otherwise, for the Events); what was done, or ``None`` when
        nothing moves (the gang is placed split)."""
        ...


@dataclass(slots=True)
class Attempt:
    """Members of one gang handed to the binder together, until each bind has reported."""

    pods: set[str]
    aborted: bool = False


@dataclass(slots=True)
class _Recovery:
    """A gang being put back together after failed hardware (or any lost member)."""

    started: float
    cause: str
    scope: frozenset[str] = frozenset()  # nodes the recovery plan chose (empty: anywhere)


@dataclass(frozen=True, slots=True)
class RecoveryRecord:
    gang: str
    cause: str
    seconds: float  # failure noticed → every member bound again
    finished_at: float  # wall-clock


@dataclass(slots=True)
class GangStepStats:
    planned: int = 0
    admitted: int = 0
    refused: int = 0
    timed_out: int = 0
    evicted: int = 0
    recovered: int = 0
    restart_partial: int = 0


class GangLifecycle:
    """Event-loop only. The state of every gang the step drives, and everything that happens to
    a gang after admission."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        podgroups: PodGroups,
        manager: GangManager | None = None,
        keys: DomainKeys | None = None,
        preemption: GangPreemption | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        planner: GangPlanner = schedule_gang,
        default_timeout_s: float = 300.0,
        backoff_s: float = 10.0,
        arrival_quiet_s: float = 2.0,
        arrival_within_s: float = 30.0,
        namespace: str | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.podgroups = podgroups
        self.namespace = namespace
        """Only gangs of this namespace (the scheduler's ``namespace``); ``None``: every one."""
        self.clock = clock
        self._clock = clock
        self._wall = wall_clock
        self.planner = planner
        self.manager = manager or GangManager(
            clock=clock, default_timeout_s=default_timeout_s, backoff_s=backoff_s
        )
        self.keys = keys
        self.backoff_s = backoff_s
        self.arrival_quiet_s = arrival_quiet_s
        self.arrival_within_s = arrival_within_s
        self.preemption = preemption
        self.stats = GangStepStats()
        self._attempts: dict[GangKey, Attempt] = {}
        # Cluster changes seen (queue.changes) when each gang's last attempt began: members parked
        # by that attempt retry at once if room was freed meanwhile (kube's moveRequestCycle).
        self._basis: dict[GangKey, int] = {}
        self._joining: set[str] = set()  # uids of pods held back once before joining a bound gang
        self._wake: dict[GangKey, float] = {}  # gangs backing off after a timeout → when
        self._untold: set[GangKey] = set()  # gangs with members parked while their members arrive
        self._restart_partial: set[GangKey] = set()
        self._started = False
        self.recovering: dict[GangKey, _Recovery] = {}
        self.recoveries: list[RecoveryRecord] = []
        #: Called when something may give :meth:`tick` work sooner than :meth:`next_tick` said
        #: (a pod tried, a PodGroup changed, a recovery began): the gang service's ticker wakes.
        self.changed: Callable[[], None] = lambda: None
        self.membership = GangMembership(
            scheduler,
            self.manager,
            podgroups,
            namespace=namespace,
            released=self._released,
            broken=lambda key, cause: self.recovery_started(key, cause=cause),
            in_flight=self._in_flight,
            ended=self._ended,
        )

    def podgroups_changed(self, namespace: str, name: str) -> None:
        """A PodGroup appeared, changed or went: members waiting on it are looked at again."""
        self.membership.podgroups_changed(namespace)
        self.changed()

    def members(self, key: GangKey) -> list[str]:
        return self.membership.members(key)

    def _in_flight(self, key: GangKey, pod: str) -> bool:
        attempt = self._attempts.get(key)
        return attempt is not None and pod in attempt.pods

    def _phase(self, key: GangKey) -> Phase | None:
        return self.membership.phase(key)

    def _ended(self, key: GangKey) -> None:
        """The gang's last member is gone: nothing of this run is kept (a re-run starts fresh)."""
        self.recovering.pop(key, None)
        self._wake.pop(key, None)
        self._untold.discard(key)
        self._basis.pop(key, None)
        self._restart_partial.discard(key)

    # --- members waiting for their gang ------------------------------------------------------

    def _nodes(self) -> int:
        return len(self.scheduler.view.snapshot().nodes)

    def _arriving(self, key: GangKey) -> bool:
        """Members of ``key`` are still arriving (:meth:`GangManager.arriving`): a member
        parked meanwhile is not told why yet; :meth:`tick` tells them all once it stops."""
        quiet, within = self.arrival_quiet_s, self.arrival_within_s
        return self.manager.arriving(key, quiet_s=quiet, within_s=within)

    def _wait(
        self,
        entry: QueuedPod,
        message: str,
        *,
        popped: bool,
        basis: int | None = None,
        explain: bool = True,
    ) -> Failure:
        """The member waits for its gang: explained (unless not ``explain``), and parked until
        something changes. ``basis``: the queue's ``changes`` when the attempt that failed began
        (default: when the last pod was popped); room freed since then sends the member to its
        backoff instead."""
        failure = Failure(entry.key, self._nodes(), {}, message, Status.unschedulable(message))
        queue = self.scheduler.queue
        if queue.entry(entry.uid) is not entry or entry.where == "bound":
            return failure
        if not popped and self.scheduler.view.held(entry.uid) is not None:
            return failure  # part of an attempt in flight
        # A sibling parked already with these words stays as it is: re-parking it at each new
        # member's arrival counted an attempt (its backoff growing) and recorded one per sibling,
        # N² of each over a burst of N members.
        parked = not popped and entry.where == "unschedulable" and entry.last_message == message
        if parked and not explain:
            return failure
        self.scheduler.report(entry, "unschedulable", failure, message, explain=explain)
        if not parked and (popped or entry.where != "in_flight"):
            queue.failed(entry, message=message, basis=basis)
        return failure

    def _ref(self, pod: str) -> PodRef:
        """The member ``namespace/name`` as the gang knows it (its UID: a write about it never
        lands on a pod re-created under the name)."""
        ns, _, name = pod.partition("/")
        return PodRef(ns, name, self.membership.uid_of(pod))

    def _entries(self, pods: Iterable[str]) -> list[QueuedPod]:
        out = []
        for pod in pods:
            entry = self.scheduler.queue.named(pod)
            if entry is not None and entry.where != "bound":
                out.append(entry)
        return out

    # --- bind outcomes ---------------------------------------------------------------------------

    def on_bind(self, job: BindJob, error: ClusterError | None) -> None:
        pod = job.request.key
        key = self.manager.gang_of_pod(pod)
        if key is None:
            return
        attempt = self._attempts.get(key)
        in_attempt = attempt is not None and pod in attempt.pods
        if attempt is not None and in_attempt:
            attempt.pods.discard(pod)
            if not attempt.pods:
                del self._attempts[key]
        if error is None:
            if attempt is not None and in_attempt and attempt.aborted:
                # Its gang gave up while this bind was on the wire: never leave it half running
                # (a bare pod stays: nothing would create it again; it counts as placed).
                why = f"pod group {key.name} could not bind all its members"
                if not self.manager.is_bare(pod):
                    self._evict((pod,), why)
                    return
                self._keep((pod,), why)
                if key not in self._attempts:
                    # The attempt is over: members parked while it was in flight are tried
                    # again (no sooner than the backoff the release set).
                    self._wake.setdefault(key, self._clock())
            self.membership.bound(pod)
            before = self._phase(key)
            self.manager.bound(pod)
            if before is not Phase.BOUND and self._phase(key) is Phase.BOUND:
                self._completed(key)
            return
        out = self.manager.bind_failed(pod, str(error))
        if out is None:
            return
        if attempt is not None and in_attempt:
            attempt.aborted = True
        self._released(key, out)
        # The attempt began long before this answer: room freed meanwhile must not be missed.
        basis = self._basis.get(key)
        for entry in self._entries(self.members(key)):
            self._wait(entry, self.manager.message(key, live=False), popped=False, basis=basis)

    def _completed(self, key: GangKey) -> None:
        status = self.manager.status(key)
        message = self.manager.message(key, live=False)
        log.info("%s", message)
        self._restart_partial.discard(key)
        recovery = self.recovering.pop(key, None)
        if recovery is not None:
            took = self._clock() - recovery.started
            self.stats.recovered += 1
            self.recoveries.append(RecoveryRecord(str(key), recovery.cause, took, self._wall()))
            self.scheduler.observer.recovered(took)
            message = f"{message}: running again {took:.1f}s after {recovery.cause}"
            log.info("pod group %s recovered in %.1fs (%s)", key, took, recovery.cause)
        for pod in self.members(key):
            if self.membership.is_bound(pod):
                self.scheduler.write(
                    self.scheduler.writer.event(
                        self._ref(pod), reason=REASON_GANG_SCHEDULED, message=message
                    ),
                    f"gang event {pod}",
                )
        if status is not None and status.members > status.bound:
            # Members beyond min waited for the gang; they may schedule one by one now.
            waiting = set(self.members(key))
            self.scheduler.queue.cluster_changed(lambda p: p.key in waiting)

    # --- releases, evictions ---------------------------------------------------------------------

    def _released(self, key: GangKey | None, out: Reject) -> None:
        view = self.scheduler.view
        for r in out.released:
            uid = self.membership.uid_of(r.pod)
            if uid:
                view.release(uid)
        if out.released:
            self.scheduler.queue.cluster_changed()  # the room it held is free for others
        if out.evict:
            self._evict(out.evict, out.message)
        self._keep(out.kept, out.message)
        if key is not None:
            attempt = self._attempts.get(key)
            if attempt is not None:
                attempt.aborted = True
            if self.manager.status(key) is not None:
                # The gang sits out its backoff; then its members are tried again, not left to
                # the 60 s unschedulable flush.
                self._wake[key] = self._clock() + self.backoff_s

    def _keep(self, pods: Iterable[str], why: str) -> None:
        """Bound bare members of a released gang stay: say so on each (a Warning Event)."""
        for pod in pods:
            message = (
                f"{why}; this pod has no controller that would create it again, "
                "so it stays bound and the group completes around it"
            )
            self.scheduler.write(
                self.scheduler.writer.event(
                    self._ref(pod), reason=REASON_GANG_KEPT, message=message, event_type="Warning"
                ),
                f"gang kept {pod}",
            )

    def _evict(self, pods: Iterable[str], why: str) -> None:
        writer = self.scheduler.writer
        for pod in pods:
            ref = self._ref(pod)
            self.stats.evicted += 1

            async def run(ref: PodRef = ref) -> None:
                await writer.event(
                    ref, reason=REASON_GANG_RELEASED, message=why, event_type="Warning"
                )
                await writer.evict(ref)

            self.scheduler.write(run(), f"release {pod}")

    # --- the timer -------------------------------------------------------------------------------

    def start(self) -> None:
        """Called once the scheduler runs (inventory and pending pods listed): learn running and
        pending gangs, and find gangs a crash left partly bound. Runs once."""
        if self._started:
            return
        self._started = True
        self.membership.sync_bound()
        self.membership.sync_pending()
        for status in self.manager.statuses():
            if 0 < status.bound < status.min_member:
                key = status.key
                self._restart_partial.add(key)
                self.stats.restart_partial += 1
                log.warning(
                    "pod group %s is partly bound (%d/%d): completing it or releasing it",
                    key,
                    status.bound,
                    status.min_member,
                )
                if status.members < status.min_member:
                    # Members are missing: it cannot complete now, so it is released at once.
                    out = self.manager.reject(
                        key, f"{status.members}/{status.min_member} members exist after a restart"
                    )
                    self._restart_partial.discard(key)
                    why = (
                        f"pod group {key.name} was left partly bound and cannot complete: "
                        f"{status.members} of {status.min_member} members exist"
                    )
                    self._evict(out.evict, why)
                    self._keep(out.kept, why)

    def tick(self) -> None:
        """Every half second or so: membership, timeouts, the end of timeout backoffs."""
        if not self._started:
            return
        self.membership.sync_bound()
        self.membership.sync_gone()
        now = self._clock()
        if not self._attempts:  # never expire a gang while its binds are on the wire
            for key, out in self.manager.tick():
                self.stats.timed_out += 1
                self._released(key, out)
                self._wake[key] = now + self.backoff_s
                log.info("%s", out.message)
                for pod in self.members(key):
                    self.scheduler.write(
                        self.scheduler.writer.event(
                            self._ref(pod),
                            reason=REASON_GANG_TIMEOUT,
                            message=out.message,
                            event_type="Warning",
                        ),
                        f"gang timeout {pod}",
                    )
                for entry in self._entries(self.members(key)):
                    self._wait(entry, self.manager.message(key, live=False), popped=False)
        for key, when in tuple(self._wake.items()):
            if now >= when:
                del self._wake[key]
                self.wake(key)
        for key in tuple(self._untold):
            if not self._arriving(key):
                self._untold.discard(key)
                self._tell(key)

    def next_tick(self) -> float | None:
        """When :meth:`tick` next has work of its own (the clock's time; now or earlier: at the
        next tick), ``None``: only a change can give it some — a pod or a PodGroup seen,
        :attr:`changed` called, an inventory event (:meth:`GangMembership.settled`). A gang
        waiting for its timeout is not looked at until then."""
        now = self._clock()
        if (
            self._attempts
            or self._untold
            or self.recovering
            or self._restart_partial
            or not self.membership.settled()
        ):
            return now
        return min(
            (t for t in (*self._wake.values(), self.manager.next_timeout()) if t is not None),
            default=None,
        )

    def _tell(self, key: GangKey) -> None:
        """The gang stopped arriving still short of members: each waiting member is told why
        (parked already, it stays where it is)."""
        status = self.manager.status(key)
        if status is None or status.members >= status.min_member or key in self._attempts:
            return  # gone, or complete: planned now
        message = self.manager.message(key, live=False)
        for entry in self._entries(self.members(key)):
            self._wait(entry, message, popped=False)

    def wake(self, key: GangKey) -> None:
        """Members of ``key`` parked as unschedulable are tried again (after their backoff)."""
        waiting = set(self.members(key))
        self.scheduler.queue.cluster_changed(lambda p: p.key in waiting)

    # --- for recovery -----------------------------------------------------------------------------

    def recovery_started(self, key: GangKey, *, cause: str, scope: Iterable[str] = ()) -> None:
        current = self.recovering.get(key)
        if current is None:
            self.recovering[key] = _Recovery(self._clock(), cause, frozenset(scope))
            self.changed()
        else:
            current.scope = frozenset(scope) or current.scope
