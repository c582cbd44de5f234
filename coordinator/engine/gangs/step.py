"""The gang step of the scheduling loop: pod-group members are planned, reserved and bound as a
whole, or not at all.

:class:`GangStep` is a ``PodStep`` of :class:`~coordinator.engine.loop.Scheduler`: every popped
pod comes here first. A pod in no gang goes on to the per-pod path. For a member:

1. the gang is known to the pure :class:`~coordinator.core.gangs.manager.GangManager` (every pending
   sibling in the queue and every bound member in the inventory is observed);
2. while fewer than min members exist, or the gang backs off after a timeout, the member waits
   with the gang's message ("waiting for pod group train-1: 0/8 members placed (3 of 8 pods
   exist)") in its ``PodScheduled`` condition and a ``FailedScheduling`` Event;
3. once min members exist, every unplaced member is decided at once with
   :func:`~coordinator.core.gangs.cycle.schedule_gang` (network rules + the per-pod core for each
   member); the decisions are assumed on the scheduler's view, reserved in the manager, and all
   members are handed to the binder together;
4. if the gang does not fit it holds nothing (no head-of-line blocking, no deadlock between two
   gangs), every member gets the reason, and preemption is tried when it may help.

Bind outcomes come back through a bind listener: a member that cannot bind abandons the whole
attempt (members already bound are evicted, so no gang is left partly running). A timer
(:meth:`GangStep.tick`) expires gangs past their timeout, forgets pods that are gone, and — at
start-up — settles gangs that a crash left partly bound: they get one attempt to complete, else
their bound members are evicted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.strategy import IntentError, PlacementIntent
from coordinator.core.framework.results import Failure, ScheduleResult
from coordinator.core.framework.status import Code, Status
from coordinator.core.gangs.cycle import GangDecision, schedule_gang
from coordinator.core.gangs.identity import GangKey, GangProblem, GangSpec, gang_of
from coordinator.core.gangs.manager import Allow, GangManager, Phase, Reject
from coordinator.core.gangs.plan import gang_intent
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.queue import QueuedPod
from coordinator.engine.binder import BindJob
from coordinator.engine.gangs.running import bound_gang, bound_pods
from coordinator.engine.loop import Outcome, Scheduler
from coordinator.engine.ports import ClusterError, PodRef

log = logging.getLogger(__name__)

__all__ = [
    "REASON_GANG_RELEASED",
    "REASON_GANG_TIMEOUT",
    "GangPreemption",
    "GangStep",
    "RecoveryRecord",
]

REASON_GANG_TIMEOUT: Final = "GangTimeout"
REASON_GANG_RELEASED: Final = "GangReleased"
REASON_GANG_SCHEDULED: Final = "GangScheduled"

PodGroups = Mapping[tuple[str, str], Mapping[str, Any]]


class GangPreemption(Protocol):
    """What the gang step asks of preemption when a gang does not fit (``preempt.Preemptor``)."""

    async def for_gang(
        self,
        key: GangKey,
        members: list[PodRequest],
        *,
        intent: PlacementIntent | None,
    ) -> str | None: ...


@dataclass(slots=True)
class _Attempt:
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
class _Cached:
    obj: Mapping[str, Any]
    spec: GangSpec | GangProblem | None


@dataclass(slots=True)
class GangStepStats:
    planned: int = 0
    admitted: int = 0
    refused: int = 0
    timed_out: int = 0
    evicted: int = 0
    recovered: int = 0
    restart_partial: int = 0


def _annotations(entry: QueuedPod) -> Mapping[str, str]:
    meta = entry.obj.get("metadata") or {}
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    return ann if isinstance(ann, Mapping) else {}


class GangStep:
    """Event-loop only. Create, then ``scheduler.pod_steps.append(step)`` and
    ``scheduler.bind_listeners.append(step.on_bind)`` (:meth:`attach` does both)."""

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
        default_timeout_s: float = 300.0,
        backoff_s: float = 10.0,
        namespace: str | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.podgroups = podgroups
        self.namespace = namespace
        """Only gangs of this namespace (the scheduler's ``namespace``); ``None``: every one."""
        self.clock = clock
        self._clock = clock
        self._wall = wall_clock
        self.manager = manager or GangManager(
            clock=clock, default_timeout_s=default_timeout_s, backoff_s=backoff_s
        )
        self.keys = keys
        self.backoff_s = backoff_s
        self.preemption = preemption
        self.stats = GangStepStats()
        self._attempts: dict[GangKey, _Attempt] = {}
        self._known: dict[str, GangKey] = {}  # pod key → gang, every member the manager knows
        self._uids: dict[str, str] = {}  # pod key → uid of the member the manager knows
        self._gone_uids: set[str] = set()  # members known to be gone (the inventory may lag)
        self._bound: set[str] = set()  # members the manager counts (or counted) as bound
        self._cache: dict[str, _Cached] = {}
        self._wake: dict[GangKey, float] = {}  # gangs backing off after a timeout → when
        self._restart_partial: set[GangKey] = set()
        self._started = False
        self.recovering: dict[GangKey, _Recovery] = {}
        self.recoveries: list[RecoveryRecord] = []

    def attach(self) -> None:
        self.scheduler.pod_steps.append(self)
        self.scheduler.bind_listeners.append(self.on_bind)

    # --- who is in which gang ----------------------------------------------------------------

    def spec_of(self, entry: QueuedPod) -> GangSpec | GangProblem | None:
        cached = self._cache.get(entry.key)
        if cached is not None and cached.obj is entry.obj:
            return cached.spec
        spec = gang_of(entry.obj, self.podgroups)
        self._cache[entry.key] = _Cached(entry.obj, spec)
        return spec

    def podgroups_changed(self, namespace: str, name: str) -> None:
        """A PodGroup appeared, changed or went: members waiting on it are looked at again."""
        self._cache.clear()
        members = {
            e.key
            for e in self.scheduler.queue.entries()
            if (e.obj.get("metadata") or {}).get("namespace", "default") == namespace
        }
        self.scheduler.queue.cluster_changed(lambda p: p.key in members)

    def _observe(self, pod: str, spec: GangSpec, priority: int, *, bound: bool, uid: str) -> None:
        old_uid = self._uids.get(pod)
        if old_uid is not None and uid and old_uid != uid:
            self._lost(pod)  # replaced under the same name (a StatefulSet, a recreated pod)
        old = self._known.get(pod)
        if old is not None and old != spec.key:
            self._forget_pod(pod)
        if bound:
            if pod in self._bound:
                return
            self._bound.add(pod)
        self.manager.observe(pod, spec, priority=priority, bound=bound)
        self._known[pod] = spec.key
        if uid:
            self._uids[pod] = uid

    def sync_pending(self) -> None:
        """Observe every pending member in the queue (siblings count before they are popped)."""
        for entry in self.scheduler.queue.entries():
            if entry.where == "bound" or not isinstance(entry.request, PodRequest):
                continue
            spec = self.spec_of(entry)
            if isinstance(spec, GangSpec) and not (
                entry.key in self._bound and self._uids.get(entry.key) == entry.uid
            ):
                self._observe(entry.key, spec, entry.request.priority, bound=False, uid=entry.uid)

    def sync_bound(self) -> None:
        """Observe every bound member in the inventory (running gangs, after a restart too)."""
        for pod in bound_pods(self.scheduler.inventory):
            if self.namespace is not None and pod.namespace != self.namespace:
                continue  # another scheduler's gang: neither completed nor released here
            key = f"{pod.namespace}/{pod.name}"
            if pod.uid in self._gone_uids:
                continue  # on its way out (evicted, replaced); the inventory catches up
            if key in self._bound and self._uids.get(key) == pod.uid:
                continue
            spec = bound_gang(pod, self.podgroups)
            if spec is not None:
                self._observe(key, spec, pod.priority, bound=True, uid=pod.uid)

    def _present(self) -> dict[str, set[str]]:
        present: dict[str, set[str]] = {}
        for e in self.scheduler.queue.entries():
            present.setdefault(e.key, set()).add(e.uid)
        for p in bound_pods(self.scheduler.inventory):
            if p.uid not in self._gone_uids:
                present.setdefault(f"{p.namespace}/{p.name}", set()).add(p.uid)
        return present

    def sync_gone(self) -> None:
        """Members that are neither pending, bound nor being bound are gone: tell the manager."""
        if not self._known:
            return  # no gang members known: nothing can be gone (skip walking every pod)
        present = self._present()
        view = self.scheduler.view
        for pod in tuple(self._known):
            uid = self._uids.get(pod, "")
            there = present.get(pod, set())
            if (uid in there if uid else bool(there)) or view.assumed(pod) is not None:
                continue
            key = self._known[pod]
            attempt = self._attempts.get(key)
            if attempt is not None and pod in attempt.pods:
                continue  # its bind is still in flight
            self._lost(pod)

    def _lost(self, pod: str) -> None:
        """A member is gone (deleted, evicted, replaced): a running gang starts re-forming."""
        key = self._known.get(pod)
        was_complete = key is not None and self._phase(key) is Phase.BOUND
        gone = self._uids.pop(pod, None)
        if gone:
            self._gone_uids.add(gone)
        self._forget_pod(pod)
        if key is not None and was_complete and self._phase(key) is not Phase.BOUND:
            self.recovery_started(key, cause=f"member {pod} is gone")

    def _forget_pod(self, pod: str) -> None:
        self._known.pop(pod, None)
        self._bound.discard(pod)
        self._cache.pop(pod, None)
        key = self.manager.gang_of_pod(pod)
        out = self.manager.remove(pod)
        if out is not None:
            self._released(key, out)

    def _phase(self, key: GangKey) -> Phase | None:
        status = self.manager.status(key)
        return None if status is None else Phase(status.phase)

    def members(self, key: GangKey) -> list[str]:
        return sorted(p for p, k in self._known.items() if k == key)

    # --- the step --------------------------------------------------------------------------------

    async def __call__(self, entry: QueuedPod) -> ScheduleResult | None:
        request = entry.request
        if not isinstance(request, PodRequest):
            return None  # a malformed pod: the per-pod path reports it
        if not self._started:
            self.start()
        spec = self.spec_of(entry)
        if spec is None:
            return None
        if isinstance(spec, GangProblem):
            return self._problem(entry, spec)
        key = spec.key
        self._observe(entry.key, spec, request.priority, bound=False, uid=entry.uid)
        if self._phase(key) is Phase.BOUND:
            return None  # members beyond min of a running gang schedule one by one
        status = self.manager.status(key)
        if status is not None and status.members < status.min_member:
            self.sync_pending()  # siblings already in the queue count at once
        if key in self._attempts:
            return self._wait(entry, self.manager.message(key), popped=True)
        if not self.manager.ready_to_plan(key):
            # Every waiting member reads the same, current message (3 of 8 pods exist, …).
            message = self.manager.message(key)
            siblings = [e for e in self._entries(self.members(key)) if e is not entry]
            return self._refuse_all(key, [entry, *siblings], entry, message)
        return await self._plan(key, entry)

    def _nodes(self) -> int:
        return len(self.scheduler.view.snapshot().nodes)

    def _problem(self, entry: QueuedPod, problem: GangProblem) -> Failure:
        code = Code.UNSCHEDULABLE if problem.waiting else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        failure = Failure(
            entry.key, self._nodes(), {}, problem.message, Status(code, (problem.message,))
        )
        outcome: Outcome = "unschedulable" if problem.waiting else "invalid"
        self.scheduler.report(entry, outcome, failure, problem.message, explain=True)
        self.scheduler.queue.failed(entry, message=problem.message, spec_error=not problem.waiting)
        return failure

    def _wait(self, entry: QueuedPod, message: str, *, popped: bool) -> Failure:
        """The member waits for its gang: explained, and parked until something changes."""
        failure = Failure(entry.key, self._nodes(), {}, message, Status.unschedulable(message))
        queue = self.scheduler.queue
        if queue.get(entry.key) is not entry or entry.where == "bound":
            return failure
        if not popped and self.scheduler.view.assumed(entry.key) is not None:
            return failure  # part of an attempt in flight
        self.scheduler.report(entry, "unschedulable", failure, message, explain=True)
        if popped or entry.where != "in_flight":
            queue.failed(entry, message=message)
        return failure

    def _entries(self, pods: Iterable[str]) -> list[QueuedPod]:
        out = []
        for pod in pods:
            entry = self.scheduler.queue.get(pod)
            if entry is not None and entry.where != "bound":
                out.append(entry)
        return out

    async def _plan(self, key: GangKey, popped: QueuedPod) -> ScheduleResult:
        self.stats.planned += 1
        entries = self._entries(self.manager.unplaced(key))
        if popped not in entries:
            entries.append(popped)
        invalid = [e for e in entries if not isinstance(e.request, PodRequest)]
        if invalid:
            message = f"pod group {key.name}: member {invalid[0].key} is invalid: " + (
                invalid[0].last_message or "its spec cannot be scheduled"
            )
            return self._refuse_all(key, entries, popped, message)
        requests = [e.request for e in entries if isinstance(e.request, PodRequest)]
        need = max(1, self.manager.needed(key))
        if len(requests) < need:
            return self._wait(popped, self.manager.message(key), popped=True)
        intent = gang_intent(
            (e.obj.get("metadata") or {}).get("annotations") or {} for e in entries
        )
        if isinstance(intent, IntentError):
            for e in entries:
                failure = Failure(
                    e.key, self._nodes(), {}, intent.message, Status.unresolvable(intent.message)
                )
                self.scheduler.report(e, "invalid", failure, intent.message, explain=True)
                if e is popped or e.where != "in_flight":
                    self.scheduler.queue.failed(e, message=intent.message, spec_error=True)
            return Failure(popped.key, 0, {}, intent.message, Status.unresolvable(intent.message))
        snapshot = self.scheduler.view.snapshot()
        recovery = self.recovering.get(key)
        result: GangDecision | Status
        result = Status.unschedulable("not planned")
        if recovery is not None and recovery.scope:
            # Replacements go where the recovery plan put them (fewest moves), if they still fit.
            result = schedule_gang(
                requests,
                snapshot,
                self.scheduler.framework,
                min_member=need,
                intent=intent,
                keys=self.keys,
                within=recovery.scope,
            )
        if not isinstance(result, GangDecision):
            result = schedule_gang(
                requests,
                snapshot,
                self.scheduler.framework,
                min_member=need,
                intent=intent,
                keys=self.keys,
            )
        if isinstance(result, GangDecision):
            return await self._admit(key, result, entries, popped)
        return await self._refuse(key, result, entries, popped, requests, intent)

    async def _admit(
        self, key: GangKey, decision: GangDecision, entries: list[QueuedPod], popped: QueuedPod
    ) -> ScheduleResult:
        view = self.scheduler.view
        by_key = {e.key: e for e in entries}
        decisions = {d.pod_key: d for d in decision.decisions}
        assumed: list[str] = []
        for d in decision.decisions:
            entry = by_key[d.pod_key]
            assert isinstance(entry.request, PodRequest)
            try:
                view.assume(entry.request, d.node, d.placement)
            except ValueError:
                continue
            assumed.append(d.pod_key)
        verdict = self.manager.reserve(key, decision.reservations())
        if not isinstance(verdict, Allow):
            for pod in assumed:
                view.forget(pod)
            message = verdict.message
            self.manager.reject(key, message)
            return self._refuse_all(key, entries, popped, self.manager.message(key))
        self.stats.admitted += 1
        attempt = _Attempt(set(verdict.pods))
        self._attempts[key] = attempt
        n = len(verdict.pods)
        log.info("pod group %s: binding %d members (%s)", key, n, decision.plan.placement.domain)
        for pod in verdict.pods:
            member = by_key.get(pod)
            chosen = decisions.get(pod)
            if member is None or chosen is None or not isinstance(member.request, PodRequest):
                continue
            note = f"binding to {chosen.node} with pod group {key.name} ({n} members together)"
            self.scheduler.report(member, "binding", chosen, note)
            self.scheduler.stats.placed += 1
            await self.scheduler.binder.submit(BindJob(member, member.request, chosen))
        for entry in entries:
            if entry.key not in decisions:  # beyond min and no room now: waits, holding nothing
                self._wait(entry, self.manager.message(key), popped=entry is popped)
        mine = decisions.get(popped.key)
        if mine is not None:
            return mine
        return Failure(popped.key, 0, {}, self.manager.message(key), Status.unschedulable(""))

    async def _refuse(
        self,
        key: GangKey,
        status: Status,
        entries: list[QueuedPod],
        popped: QueuedPod,
        requests: list[PodRequest],
        intent: PlacementIntent,
    ) -> Failure:
        self.stats.refused += 1
        reason = status.message
        out = self.manager.reject(key, reason)
        if key in self._restart_partial:
            # Found partly bound after a restart and it cannot complete now: release it whole.
            self._restart_partial.discard(key)
            self._evict(
                out.evict,
                f"pod group {key.name} was left partly bound and cannot "
                f"complete now ({reason}); its bound members are released",
            )
        note = None
        if self.preemption is not None and status.code is not Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            try:
                note = await self.preemption.for_gang(key, requests, intent=intent)
            except Exception:
                log.exception("preemption for pod group %s failed", key)
        message = self.manager.message(key)
        if note:
            message = f"{message}; {note}"
        return self._refuse_all(key, entries, popped, message)

    def _refuse_all(
        self, key: GangKey, entries: list[QueuedPod], popped: QueuedPod, message: str
    ) -> Failure:
        out = self._wait(popped, message, popped=True)
        for entry in entries:
            if entry is not popped:
                self._wait(entry, message, popped=False)
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
                # Its gang gave up while this bind was on the wire: never leave it half running.
                self._evict((pod,), f"pod group {key.name} could not bind all its members")
                return
            self._bound.add(pod)
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
        for entry in self._entries(self.members(key)):
            self._wait(entry, self.manager.message(key), popped=False)

    def _completed(self, key: GangKey) -> None:
        status = self.manager.status(key)
        message = self.manager.message(key)
        log.info("%s", message)
        self._restart_partial.discard(key)
        recovery = self.recovering.pop(key, None)
        if recovery is not None:
            took = self._clock() - recovery.started
            self.stats.recovered += 1
            self.recoveries.append(RecoveryRecord(str(key), recovery.cause, took, self._wall()))
            message = f"{message}: running again {took:.1f}s after {recovery.cause}"
            log.info("pod group %s recovered in %.1fs (%s)", key, took, recovery.cause)
        for pod in self.members(key):
            if pod in self._bound:
                ns, _, name = pod.partition("/")
                self.scheduler.write(
                    self.scheduler.writer.event(
                        PodRef(ns, name), reason=REASON_GANG_SCHEDULED, message=message
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
            view.forget(r.pod)
        if out.evict:
            self._evict(out.evict, out.message)
        if key is not None:
            attempt = self._attempts.get(key)
            if attempt is not None:
                attempt.aborted = True

    def _evict(self, pods: Iterable[str], why: str) -> None:
        writer = self.scheduler.writer
        for pod in pods:
            ns, _, name = pod.partition("/")
            ref = PodRef(ns, name)
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
        self.sync_bound()
        self.sync_pending()
        for status in self.manager.statuses():
            if 0 < status.bound < status.min_member:
                key = GangKey(status.namespace, status.name)
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
                    self._evict(
                        out.evict,
                        f"pod group {key.name} was left partly bound and cannot complete: "
                        f"{status.members} of {status.min_member} members exist",
                    )

    def tick(self) -> None:
        """Every half second or so: membership, timeouts, the end of timeout backoffs."""
        if not self._started:
            return
        self.sync_bound()
        self.sync_gone()
        now = self._clock()
        if not self._attempts:  # never expire a gang while its binds are on the wire
            for key, out in self.manager.tick():
                self.stats.timed_out += 1
                self._released(key, out)
                self._wake[key] = now + self.backoff_s
                log.info("%s", out.message)
                for pod in self.members(key):
                    ns, _, name = pod.partition("/")
                    self.scheduler.write(
                        self.scheduler.writer.event(
                            PodRef(ns, name),
                            reason=REASON_GANG_TIMEOUT,
                            message=out.message,
                            event_type="Warning",
                        ),
                        f"gang timeout {pod}",
                    )
                for entry in self._entries(self.members(key)):
                    self._wait(entry, self.manager.message(key), popped=False)
        for key, when in tuple(self._wake.items()):
            if now >= when:
                del self._wake[key]
                self.wake(key)

    def wake(self, key: GangKey) -> None:
        """Members of ``key`` parked as unschedulable are tried again (after their backoff)."""
        waiting = set(self.members(key))
        self.scheduler.queue.cluster_changed(lambda p: p.key in waiting)

    # --- for recovery -----------------------------------------------------------------------------

    def recovery_started(self, key: GangKey, *, cause: str, scope: Iterable[str] = ()) -> None:
        current = self.recovering.get(key)
        if current is None:
            self.recovering[key] = _Recovery(self._clock(), cause, frozenset(scope))
        else:
            current.scope = frozenset(scope) or current.scope
