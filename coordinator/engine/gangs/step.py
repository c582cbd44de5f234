"""The gang step of the scheduling loop: pod-group members are planned, reserved and bound as a
whole, or not at all.

:class:`GangStep` is a ``PodStep`` of :class:`~coordinator.engine.loop.Scheduler`: every popped
pod comes here first, before the per-pod cycle. A pod in no gang goes on to the per-pod path. For
a member:

1. the gang is known to the pure :class:`~coordinator.core.gangs.manager.GangManager` (every pending
   sibling in the queue and every bound member in the inventory is observed, see
   :mod:`.membership`);
2. while fewer than min members exist, or the gang backs off after a timeout, the member waits
   with the gang's message ("waiting for pod group train-1: 0/8 members placed (waiting for all
   8 pods to exist)") in its ``PodScheduled`` condition and a ``FailedScheduling`` Event — the
   same words from the first member to the last, so each member is told once, not at every
   arrival; and not while its siblings are still arriving (a new one in the last
   ``arrival_quiet_s``, 2 s, and the gang's timeout began less than ``arrival_within_s``, 30 s,
   ago): the tick tells them if the gang stops short (:meth:`GangLifecycle.tick`);
3. once min members exist, every unplaced member is decided at once with
   :func:`~coordinator.core.gangs.cycle.schedule_gang` (network rules + the per-pod core for each
   member); the decisions are assumed on the scheduler's view, reserved in the manager, every
   member's DRA claims are written (all or none), and all members are handed to the binder
   together;
4. if the gang does not fit it holds nothing (no head-of-line blocking, no deadlock between two
   gangs), every member gets the reason, and preemption is tried when it may help; while the
   victims it evicted are leaving, the gang waits for them without being planned again.

What happens after admission (bind outcomes, timeouts, restarts) is :mod:`.lifecycle`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from coordinator.core.domains.capacity import node_states
from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.strategy import IntentError, PlacementIntent
from coordinator.core.framework.results import Failure, ScheduleResult
from coordinator.core.gangs.cycle import GangDecision
from coordinator.core.gangs.identity import GangKey, GangProblem, GangSpec, topology_field
from coordinator.core.gangs.manager import Allow, Phase
from coordinator.core.gangs.plan import gang_intent
from coordinator.core.gangs.slices import group_domain, with_gang_topology
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.preemption.gather import gather_intent
from coordinator.core.queue import QueuedPod
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Code, Status
from coordinator.engine.binder import BindJob
from coordinator.engine.gangs.lifecycle import Attempt, GangLifecycle
from coordinator.engine.loop import Narrowed, Outcome

log = logging.getLogger(__name__)

__all__ = ["GangStep"]


class GangStep(GangLifecycle):
    """Event-loop only. Create, then :meth:`attach` (``scheduler.pod_steps`` and
    ``scheduler.bind_listeners``)."""

    def attach(self) -> None:
        self.scheduler.pod_steps.append(self)
        self.scheduler.bind_listeners.append(self.on_bind)

    # --- the step --------------------------------------------------------------------------------

    async def __call__(self, entry: QueuedPod) -> ScheduleResult | Narrowed | None:
        try:
            return await self._step(entry)
        finally:
            self.changed()  # a gang may wait, bind, back off or preempt now: the ticker looks

    async def _step(self, entry: QueuedPod) -> ScheduleResult | Narrowed | None:
        request = entry.request
        if not isinstance(request, PodRequest):
            return None  # a malformed pod: the per-pod path reports it
        if not self._started:
            self.start()
        spec = self.membership.spec_of(entry)
        if spec is None:
            return None
        if isinstance(spec, GangProblem):
            return self._problem(entry, spec)
        key = spec.key
        known = self.manager.status(key)
        fresh = (
            self.manager.gang_of_pod(entry.key) != key
            or self.membership.uid_of(entry.key) != entry.uid
        )
        if known is not None and known.bound and fresh:
            # A member new to a gang with bound members (or a pod recreated under a member's
            # name): first forget members already gone, all at once — a re-run of bare pods must
            # neither join the old run's members nor read as its recovery.
            self.membership.sync_gone()
            if self._phase(key) is Phase.BOUND and entry.uid not in self._joining:
                # Joining a running gang: once, give the watches a moment to show whether that
                # run is ending (its pods being deleted) before this pod counts as one of it.
                self._joining.add(entry.uid)
                self.scheduler.queue.retry(entry)
                message = f"pod group {key.name}: joining a running group"
                return Failure(entry.key, 0, {}, message, Status.unschedulable(message))
        self._joining.discard(entry.uid)
        self.membership.observe_entry(entry, spec)
        disagreement = self.manager.disagreement(key)
        if disagreement:
            message = f"pod group {key.name}: {disagreement}"
            siblings = [e for e in self._entries(self.members(key)) if e is not entry]
            return self._refuse_all(key, [entry, *siblings], entry, message)
        if self._phase(key) is Phase.BOUND:
            # members beyond min of a running gang schedule one by one, in its domain
            return self._in_group_domain(key, spec, request)
        status = self.manager.status(key)
        if status is not None and status.members < status.min_member:
            self.membership.sync_pending()  # siblings already in the queue count at once
        if key in self._attempts:
            if status is not None and status.reserved + status.bound >= status.min_member:
                return self._await_binds(entry, key)
            return self._wait(entry, self.manager.message(key, live=False), popped=True)
        if not self.manager.ready_to_plan(key):
            # Every waiting member reads the same message, unchanged while members arrive: a
            # member told once is not told again at each arrival (the unchanged explanation is
            # not written again; the live count is in the PodGroup's status). While members are
            # still arriving none is told: the tick tells them if the gang stops short.
            message = self.manager.message(key, live=False)
            siblings = [e for e in self._entries(self.members(key)) if e is not entry]
            explain = not self._arriving(key)
            if not explain:
                self._untold.add(key)
            return self._refuse_all(key, [entry, *siblings], entry, message, explain=explain)
        return await self._plan(spec, entry)

    def _await_binds(self, entry: QueuedPod, key: GangKey) -> Failure:
        """A member beyond a minimum that is placed and binding (a Deployment's replica popped
        while the first one binds) waits for those binds without a FailedScheduling Event —
        nothing is wrong — and is tried again once they land (``_completed``) or told why they
        failed."""
        message = f"pod group {key.name}: waiting for its members' binds"
        self.scheduler.queue.failed(entry, message=message)
        return Failure(entry.key, 0, {}, message, Status.unschedulable(message))

    def _in_group_domain(self, key: GangKey, spec: GangSpec, pod: PodRequest) -> Narrowed | None:
        """A member joining a bound gang that stays in one domain goes where its placed members
        are (:func:`~coordinator.core.gangs.slices.group_domain`)."""
        found = self._group_domain(key, spec, pod, self._placed_labels(key))
        if found is None:
            return None
        label, value, written = found
        why = f"pod group {key.name} stays in {label}={value}, where its members run ({written})"
        return Narrowed(_kept_to(pod, label, value), why)

    def _placed_labels(self, key: GangKey) -> list[Mapping[str, str]]:
        """The labels of the nodes the gang's placed members are on."""
        labels = self.scheduler.view.snapshot().labels_of
        return [labels(node) or {} for node in self.membership.placed_nodes(key)]

    def _group_domain(
        self, key: GangKey, spec: GangSpec, pod: PodRequest, placed: list[Mapping[str, str]]
    ) -> tuple[str, str, str] | None:
        if not placed:
            return None
        keys = self.keys or DomainKeys()
        return group_domain(pod, spec.topology, topology_field(key), keys, placed)

    def _problem(self, entry: QueuedPod, problem: GangProblem) -> Failure:
        code = Code.UNSCHEDULABLE if problem.waiting else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        failure = Failure(
            entry.key, self._nodes(), {}, problem.message, Status(code, (problem.message,))
        )
        outcome: Outcome = "unschedulable" if problem.waiting else "invalid"
        self.scheduler.report(entry, outcome, failure, problem.message, explain=True)
        self.scheduler.queue.failed(entry, message=problem.message, spec_error=not problem.waiting)
        return failure

    async def _plan(self, spec: GangSpec, popped: QueuedPod) -> ScheduleResult:
        key = spec.key
        self.stats.planned += 1
        self._basis[key] = self.scheduler.queue.changes
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
        # A Workload-API PodGroup's topology constraint: the members' group level.
        requests = with_gang_topology(requests, spec.topology, topology_field(key))
        # Replacements of a gang with members still running go to those members' domain.
        placed = self._placed_labels(key)
        if placed:
            requests = [
                _kept_to(r, found[0], found[1])
                if (found := self._group_domain(key, spec, r, placed))
                else r
                for r in requests
            ]
        need = max(1, self.manager.needed(key))
        if len(requests) < need:
            return self._wait(popped, self.manager.message(key, live=False), popped=True)
        waiting = self.preemption.preempting(key, requests) if self.preemption else None
        if waiting:
            # Its victims are leaving and their room is held for it: it waits for them, with
            # the words it was told (not planned again, not told again, at each one's going).
            message = f"{self.manager.message(key, live=False)}; {waiting}"
            return self._refuse_all(key, entries, popped, message)
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
        # gpu-count counts the whole workload: the members still running too (a replacement).
        intent = replace(intent, placed_gpus=self.membership.placed_gpus(key))
        # Others' nominations at or above the gang's priority hold their room (nominations.py).
        scheduler = self.scheduler
        snapshot = scheduler.nominations.gang_snapshot(requests, scheduler.view.snapshot())
        recovery = self.recovering.get(key)
        # The members' profile (a gang's members name one schedulerName).
        framework = scheduler.profiles.for_name(requests[0].scheduler_name if requests else None)
        result: GangDecision | Status
        result = Status.unschedulable("not planned")
        if recovery is not None and recovery.scope:
            # Replacements go where the recovery plan put them (fewest moves), if they still fit.
            result = self.planner(
                requests,
                snapshot,
                framework,
                min_member=need,
                intent=intent,
                keys=self.keys,
                within=recovery.scope,
            )
        if not isinstance(result, GangDecision):
            result = self.planner(
                requests,
                snapshot,
                framework,
                min_member=need,
                intent=intent,
                keys=self.keys,
            )
        if isinstance(result, GangDecision):
            gathering = await self._gather(key, result, requests, intent, snapshot)
            if gathering is not None:
                message = f"{self.manager.message(key, live=False)}; {gathering}"
                return self._refuse_all(key, entries, popped, message)
            return await self._admit(key, result, entries, popped)
        return await self._refuse(key, result, entries, popped, requests, intent)

    async def _gather(
        self,
        key: GangKey,
        decision: GangDecision,
        requests: list[PodRequest],
        intent: PlacementIntent,
        snapshot: Snapshot,
    ) -> str | None:
        """A gang the planner would split over NVLink cliques asks defragmentation to gather it
        into one (:mod:`coordinator.core.preemption.gather`): what was done (the gang waits for
        the moves), or ``None`` (it is placed as planned)."""
        keys = self.keys or DomainKeys()
        chosen = {d.node for d in decision.decisions}
        if (
            self.preemption is None
            or len(chosen) < 2
            or not keys.clique
            or not snapshot.domain_slots(keys.clique).total
        ):
            return None  # one node, or no cliques: nothing to gather (no node read per gang)
        gpus = sum(r.gpus for r in requests)
        asked = gather_intent(chosen, gpus, node_states(snapshot), keys=keys, intent=intent)
        if asked is None:
            return None
        # each node in no clique is an NVLink domain of its own
        domains = {(snapshot.labels_of(n) or {}).get(keys.clique) or f"node {n}" for n in chosen}
        split = f"split over {len(domains)} NVLink domains"
        try:
            return await self.preemption.gather(key, requests, intent=asked, split=split)
        except Exception:
            log.exception("gathering pod group %s into one clique failed", key)
            return None

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
                view.assume(entry.request, d.node, d.placement, d.claims)
            except ValueError:
                continue
            assumed.append(entry.uid)
        why = decision.plan.placement.explanation
        verdict = self.manager.reserve(key, decision.reservations(), why=why)
        if not isinstance(verdict, Allow):
            for uid in assumed:
                view.release(uid)
            message = verdict.message
            self.manager.reject(key, message)
            return self._refuse_all(key, entries, popped, self.manager.message(key, live=False))
        self.stats.admitted += 1
        attempt = Attempt(set(verdict.pods))
        self._attempts[key] = attempt
        n = len(verdict.pods)
        log.info("pod group %s: binding %d members (%s)", key, n, decision.plan.placement.domain)
        jobs: list[BindJob] = []
        for pod in verdict.pods:
            member = by_key.get(pod)
            chosen = decisions.get(pod)
            if member is None or chosen is None or not isinstance(member.request, PodRequest):
                continue
            note = (
                f"binding to {chosen.node} with pod group {key.name} ({n} members together)"
                f" on {why}"
            )
            self.scheduler.report(member, "binding", chosen, note)
            self.scheduler.stats.placed += 1
            jobs.append(self.scheduler.bind_job(member, member.request, chosen))
        unknown = decision.plan.placement.unknown_domain
        if unknown is not None:
            note = f"preferred domain {unknown!r} is not a leaf, spine or zone of this cluster"
            for job in jobs:
                self.scheduler.warn(job.pod, "UnknownTopologyDomain", f"{note}; placed on {why}")
        # DRA: every member's claims are allocated and reserved before any member binds.
        for job in await self.scheduler.binder.write_claims(jobs) or ():
            await self.scheduler.binder.submit(job)
        if self.preemption is not None:
            self.preemption.binding(key)
        for entry in entries:
            if entry.key not in decisions:  # beyond min and no room now: waits, holding nothing
                self._wait(entry, self.manager.message(key, live=False), popped=entry is popped)
        mine = decisions.get(popped.key)
        if mine is not None:
            return mine
        return Failure(
            popped.key, 0, {}, self.manager.message(key, live=False), Status.unschedulable("")
        )

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
            why = f"pod group {key.name} was left partly bound and cannot complete now ({reason})"
            self._evict(out.evict, f"{why}; its bound members are released")
            self._keep(out.kept, why)
        note = None
        if self.preemption is not None and status.code is not Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            try:
                note = await self.preemption.for_gang(key, requests, intent=intent)
            except Exception:
                log.exception("preemption for pod group %s failed", key)
        message = self.manager.message(key, live=False)
        if note:
            message = f"{message}; {note}"
        return self._refuse_all(key, entries, popped, message)

    def _refuse_all(
        self,
        key: GangKey,
        entries: list[QueuedPod],
        popped: QueuedPod,
        message: str,
        *,
        explain: bool = True,
    ) -> Failure:
        out = self._wait(popped, message, popped=True, explain=explain)
        for entry in entries:
            if entry is not popped:
                self._wait(entry, message, popped=False, explain=explain)
        return out


def _kept_to(pod: PodRequest, label: str, value: str) -> PodRequest:
    """``pod`` asking for nodes labelled ``label=value`` besides what it asks already."""
    return replace(pod, node_selector=(*pod.node_selector, (label, value)))
