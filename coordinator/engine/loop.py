"""The scheduling loop: pop → gang step → snapshot → ``schedule_one`` → assume → bind.

One pod at a time (decisions are sequential and each sees the previous ones through the
assumptions), binds in the background (:mod:`.binder`). No API round-trip happens per node or per
decision: the snapshot is local, the only writes are the bind itself and the explanation.

Outcomes:

- **placed** — the pod is assumed on its node and handed to the binder; once bound, a
  ``Scheduled`` Event reads "Successfully assigned ns/pod to node (GPUs 0,1 NVLink; NUMA 0)".
- **unschedulable** — a ``FailedScheduling`` Event and ``PodScheduled=False`` with the summary
  ("0/12 nodes are available: …"), the condition written again only when the message changes
  (an unchanged one only counts the attempt on the Event, at most once per
  ``failure_repost_s``); the pod waits for the cluster to change. A pod rejected for its own spec
  waits for an edit instead, and everyone else is served meanwhile.

Every piece of per-pod state (the room held, the explanation last posted, the last attempt) is
keyed by the pod's UID: a pod deleted and created again under the same name is a new pod, placed
at once and explained on its own. When a pod is known to be gone (replaced under its name, being
deleted) or its bind fails, the room held for it is released at once and the pods waiting for
room are tried again.

Hooks for the gang and preemption steps (see docs/runtime.md): ``pod_steps`` see every popped pod
before the per-pod cycle (the gang step plans a whole gang there), ``bind_listeners`` hear every
bind outcome, and ``post_filter`` hooks are called on every failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from common.waiting import wait_set
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.profiles import Profiles
from coordinator.core.framework.results import Decision, Failure, ScheduleResult
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from coordinator.core.queue import QueuedPod, QueueSettings, SchedulingQueue
from coordinator.core.registry import build_profiles
from coordinator.core.snapshot.podinfo import PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.engine.attempts import Attempt, AttemptLog
from coordinator.engine.binder import Binder, BindJob
from coordinator.engine.changes import PendingChanges
from coordinator.engine.claimgate import missing_claim
from coordinator.engine.claims import claims_to_write
from coordinator.engine.forecasts import STATE_EVERY_S, Forecast, Forecasts
from coordinator.engine.leadership import ALWAYS, Leadership
from coordinator.engine.nominations import Nominations, placement_group
from coordinator.engine.observer import Outcome, SchedulingObserver
from coordinator.engine.outage import MAX_WAIT_S, Outage
from coordinator.engine.ports import (
    REASON_FAILED,
    BindConflict,
    ClusterError,
    ClusterWriter,
    NoAnswer,
    Nominate,
    PodRef,
    scheduled_message,
)
from coordinator.engine.view import ClusterView
from coordinator.inventory.store import Inventory, InventoryEvent

log = logging.getLogger(__name__)

__all__ = [
    "Attempt",
    "BindListener",
    "Narrowed",
    "Outcome",
    "PodStep",
    "PostFilterHook",
    "RuntimeSettings",
    "RuntimeStats",
    "Scheduler",
]

#: Called with the pod, the failure and the snapshot it was decided on; returns a message to add
#: to the explanation (e.g. "preempting 2 pods on gpu-3") or ``None``. Preemption plugs in here.
PostFilterHook = Callable[[PodRequest, Failure, Snapshot], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class Narrowed:
    """A :data:`PodStep`'s answer: schedule the pod one by one as ``request`` (the pod narrowed
    to where its group already runs); a failure's message begins with ``why``."""

    request: PodRequest
    why: str


#: (gangs_runtime) Called with every popped pod before the per-pod path; returns the result
#: when it decided the pod itself (gang members: whole-gang planning), ``None`` to schedule it
#: one by one, :class:`Narrowed` to schedule it one by one within a narrower request.
PodStep = Callable[[QueuedPod], Awaitable[ScheduleResult | Narrowed | None]]
#: (gangs_runtime) Told about every bind outcome: the job and ``None`` (bound) or the error.
BindListener = Callable[[BindJob, ClusterError | None], None]
#: Events and status writes in flight at once: as many as binds by default
#: (``max_binds_in_flight``), one Event per bind. The API client's pool gives them at most
#: ``ClientSettings.deferrable_connections`` connections (the rest wait for one of theirs), so
#: this bounds the writes queued, not the connections (measured before that cap: 32 let 943 of
#: 1,000 Scheduled Events be written by the last bind at load 13; 8: 418 of 1,500).
_MAX_BACKGROUND_WRITES: Final = 64
#: Writes that free room a pod waits for (evictions), in a pool of their own: never behind the
#: Events and explanations of the background pool.
_MAX_URGENT_WRITES: Final = 64


@dataclass(slots=True)
class _Posted:
    """A pod's explanation as last written: the failure's ``message``, when (``at``), the
    forecast stated with it, the ``text`` written (both together), and when an attempt was last
    ``counted`` on its Event."""

    message: str
    at: float
    forecast: Forecast | None
    text: str
    counted: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeSettings:
    max_binds_in_flight: int = 64
    """Binds running concurrently (pipelining); 1 binds one pod at a time."""
    failure_repost_s: float = 60.0
    """An unchanged failure explanation is counted on its Event at most this often (its
    ``PodScheduled`` condition is not written again)."""
    explanations_kept: int = 10_000
    """Last attempts remembered for ``/v1/pods/{ns}/{name}/explain``."""
    explanations_detailed: int = 100
    """Of those, the newest decisions that keep every node's verdict (:mod:`.attempts`)."""
    queue: QueueSettings = field(default_factory=QueueSettings)
    """Backoff and retry timing."""


@dataclass(slots=True)
class RuntimeStats:
    attempts: int = 0
    placed: int = 0
    bound: int = 0
    unschedulable: int = 0
    invalid: int = 0
    bind_conflicts: int = 0
    bind_errors: int = 0
    write_errors: int = 0


class Scheduler:
    """The scheduling profiles over one cluster: one queue, one snapshot, each pod scheduled by
    the profile its ``schedulerName`` names. Create, then ``await run()`` in a task."""

    def __init__(
        self,
        *,
        view: ClusterView,
        writer: ClusterWriter,
        framework: Framework | Profiles | None = None,
        queue: SchedulingQueue | None = None,
        settings: RuntimeSettings | None = None,
        post_filter: Sequence[PostFilterHook] = (),
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings or RuntimeSettings()
        self.view = view
        self.writer = writer
        self._profiles = _profiles(framework)
        self._clock = clock
        self._wall = wall_clock
        self._wakeup = asyncio.Event()
        self.queue = queue or SchedulingQueue(self.settings.queue, clock=clock)
        self.queue.notify = self._wakeup.set
        self.queue.on_removed = self._left_queue
        self.queue.gate = lambda entry: missing_claim(entry, view.dra)  # DRA PreEnqueue
        view.on_release = self._room_released
        self.post_filter: list[PostFilterHook] = list(post_filter)
        self.pod_steps: list[PodStep] = []  # gangs_runtime: the gang step
        self.bind_listeners: list[BindListener] = []  # gangs_runtime: gang bookkeeping
        self.stats = RuntimeStats()
        self.observer = SchedulingObserver()  # the metrics replace it (engine/observer.py)
        self._attempt_began: float | None = None  # while an attempt runs: when it began
        self._attempts = AttemptLog(
            kept=self.settings.explanations_kept, detailed=self.settings.explanations_detailed
        )
        self._posted: dict[str, _Posted] = {}  # uid → the explanation last written
        #: Predicted starts (coordinator.forecast.live fills it): stated after the failure.
        self.forecasts: Forecasts | None = None
        self._restating: set[str] = set()  # uids with a deferred restatement
        self._writes: set[asyncio.Task[None]] = set()
        self._write_slots = asyncio.Semaphore(_MAX_BACKGROUND_WRITES)
        self._urgent_slots = asyncio.Semaphore(_MAX_URGENT_WRITES)
        self._urgent = 0  # urgent writes waiting or on the wire
        self._calm = asyncio.Event()  # set while there are none
        self._calm.set()
        self._grace_retry: asyncio.TimerHandle | None = None  # retry all at the grace's end
        #: nominations made during the attempt under way, by pod UID: written with the pod's
        #: explanation, or alone when the attempt ends (:meth:`nominate`)
        self._nominating: dict[str, tuple[PodRef, str, Nominate]] = {}
        self.changes = PendingChanges(self.queue, self._wakeup.set, self.inventory.scheduling_node)
        self._shapes: dict[str, object] = {}
        #: Only the leader schedules: asked before every cycle and every bind.
        self.leadership: Leadership = ALWAYS
        self.pauses = 0  # times this replica waited to lead (at start, or having lost the lead)
        self._has_led = False  # a cycle ran while this replica led
        #: Binds that got no answer pause the whole loop (:mod:`.outage`).
        self.outage = Outage()
        self.binder = Binder(
            writer,
            node_exists=lambda name: name in view.inventory,
            on_bound=self._bound,
            on_failed=self._bind_failed,
            max_in_flight=self.settings.max_binds_in_flight,
            on_claims=lambda job, written: view.claims_written(job.entry.uid, written),
            may_bind=lambda: self.leadership.is_leader(),
            hold=self.hold_writes,
            unhold=self.release_writes,
        )
        view.on_dra_change = self.changes.dra
        view.volumes.on_change = self.changes.volumes  # a claim or volume may fit a pod now
        view.volumes.on_detach = self.changes.volume_detached  # a node's volume slot freed
        self._unsubscribe = view.inventory.subscribe(self._on_inventory)
        # Room held for preemptors (engine/nominations.py): consulted by every cycle below.
        self.nominations = Nominations(self.queue, held=lambda uid: view.held(uid) is not None)
        self.idle = asyncio.Event()  # set while nothing is ready to schedule

    @property
    def inventory(self) -> Inventory:
        return self.view.inventory

    def close(self) -> None:
        self._unsubscribe()
        self.view.close()
        if self._grace_retry is not None:
            self._grace_retry.cancel()

    # --- cluster changes -----------------------------------------------------------------------

    def _node_shape_changed(self, name: str) -> bool:
        """Did the node's labels, taints, readiness or hardware change (not just its pods)?"""
        state = self.inventory.scheduling_node(name)
        shape = (
            None
            if state is None
            else (
                tuple(sorted(state.labels.items())),
                state.taints,
                state.unschedulable,
                state.ready,
                state.stale,
                state.topology,
            )
        )
        before = self._shapes.get(name)
        if shape is None:
            self._shapes.pop(name, None)
        else:
            self._shapes[name] = shape
        return before != shape

    def _on_inventory(self, event: InventoryEvent) -> None:
        if event.kind != "removed" and not event.pods_only and self._node_shape_changed(event.node):
            # A node came or its labels/taints/readiness changed: who it may hold may fit now.
            self.changes.nodes((event.node,))
        elif event.left is not None and event.came is None and event.changed_in_place is None:
            # A pod left: those its room, ports, volumes or labels held back may fit now.
            self.changes.pod_left(event.left, gained=event.capacity_gained)
        elif event.capacity_gained:
            self.changes.capacity()  # room gained otherwise (a pod shrank in place)
        elif event.came is not None:
            # A pod appeared: pods whose required affinity or spread it may satisfy may fit
            # now (a cache they must sit next to got bound).
            self.changes.pod_came(event.came.namespace, event.came.labels)
        elif event.kind in ("updated", "added") and not event.labels_kept:
            # A pod changed its labels: pods with (anti-)affinity or spread constraints may
            # fit now.
            self.changes.pods()

    def _grace_over(self) -> None:
        self.inventory.end_grace()  # if the coordinator's own timer has not yet
        self._room_released()

    def _room_released(self, pod: PodInfo | None = None) -> None:
        """Room held for ``pod`` was freed without the inventory taking it over (bind failed, pod
        deleted before its bind was seen): the pods its leaving may help may fit now, as when a
        bound pod leaves (kube-scheduler sends an assumed pod it forgets through the same
        queueing hints). ``None``: DRA claims or several pods' room went; anyone may fit."""
        if pod is None:
            self.changes.everything()
        else:
            self.changes.pod_left(pod, gained=True)

    def _left_queue(self, entry: QueuedPod, gone: bool) -> None:
        """A pod left the queue: known to be gone (deleted, replaced under its name), or bound or
        not known which (``gone`` False: what it holds is settled by its bind or the inventory)."""
        self._posted.pop(entry.uid, None)
        if not gone:
            return  # bound: its room stays held until the inventory shows it
        self._attempts.forget(entry.uid)
        if self.view.release(entry.uid):
            log.info(
                "pod %s (uid %s) is gone before its bind was seen: room released",
                entry.key,
                entry.uid,
            )

    @property
    def framework(self) -> Framework:
        """The default profile (the first)."""
        return self._profiles.default

    @framework.setter
    def framework(self, framework: Framework) -> None:
        self.profiles = Profiles((framework,))

    @property
    def profiles(self) -> Profiles:
        return self._profiles

    @profiles.setter
    def profiles(self, profiles: Profiles) -> None:
        """New profiles (a reloaded ``scheduling`` section) take over at the next cycle, having
        seen the pods already running."""
        running = tuple(self._running())
        for fw in profiles:
            fw.observe_running(running)
        self._profiles = profiles

    def framework_for(self, entry: QueuedPod) -> Framework:
        """The profile the pod's ``schedulerName`` names (the default if none does)."""
        return self._profiles.for_pod(entry.obj)

    def _running(self) -> Iterator[PodInfo]:
        for node in self.view.snapshot().nodes:
            yield from node.pods

    # --- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Schedule until cancelled (from the inventory's first sync: the pods running then
        are the shape mix's first)."""
        running = tuple(self._running())
        for fw in self._profiles:
            fw.observe_running(running)
        try:
            while True:
                await self.wait_until_leading()
                self._has_led = True
                await self._wait_out_outage()
                await self.run_once()
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # asyncio.wait_for (Python 3.11) returns instead of raising when the awaited
                    # event fires in the same step as the cancel: never loop on after a cancel.
                    raise asyncio.CancelledError
        finally:
            await self.binder.cancel()

    async def wait_until_leading(self) -> None:
        """Return once this replica leads (at once if it does). Until then no cycle (so no bind,
        Event or condition), and the log says why: not leading yet, or the lead lost. After a
        pause every waiting pod is looked at afresh (the other leader moved on)."""
        if self.leadership.is_leader():
            return
        self.pauses += 1
        why = self.leadership.why_not_leading()
        if self._has_led:
            log.warning("this replica lost the lead: %s; scheduling stopped until it leads", why)
        else:
            log.info("this replica does not lead yet: %s; it schedules once it leads", why)
        self.idle.set()
        await self.leadership.wait_until_leading()
        log.info("leading again: scheduling resumes" if self._has_led else "leading")
        self.changes.everything()

    async def _wait_out_outage(self) -> None:
        """The API server did not answer the last binds: no cycle until the pause is over (the
        next bind is the probe)."""
        while self.outage.ongoing and (left := self.outage.left_s(self._clock())) > 0:
            self.idle.set()
            await asyncio.sleep(left)

    async def run_once(self) -> bool:
        """Schedule the next ready pod, or wait until one may be ready. True if one was tried."""
        self.view.expire()
        self.changes.apply()
        entry = self.queue.pop()
        if entry is None:
            self.idle.set()
            self._wakeup.clear()
            waits = [
                t for t in (self.queue.next_ready_in(), self.view.next_expiry_in()) if t is not None
            ]
            await wait_set(self._wakeup, min(waits, default=None))
            return False
        self.idle.clear()
        await self.schedule(entry)
        await asyncio.sleep(0)  # let watches and binds progress between decisions
        return True

    async def schedule(self, entry: QueuedPod) -> ScheduleResult:
        """One attempt for a popped pod."""
        self.stats.attempts += 1
        self._attempt_began = self._clock()
        try:
            return await self._attempt(entry)
        finally:
            self._attempt_began = None
            for pod, node, alone in self._nominating.values():  # not explained this attempt
                self.write(alone(pod, node), f"nominate {pod.key}", urgent=True)
            self._nominating.clear()

    async def _attempt(self, entry: QueuedPod) -> ScheduleResult:
        request = entry.request
        if isinstance(request, PodRequest) and self.view.held(entry.uid) is not None:
            # Still held by an earlier decision (bind in flight, or bound and the watch is
            # catching up): never place a pod twice.
            self.queue.retry(entry)
            return Failure(request.key, 0, {}, f"pod {request.key} is already being bound")
        why = ""
        for step in self.pod_steps:  # gangs_runtime: gang members are planned as a whole
            handled = await step(entry)
            if isinstance(handled, Narrowed):
                request, why = handled.request, handled.why
                break
            if handled is not None:
                return handled
        snapshot = self.nominations.snapshot_for(request, self.view.snapshot())
        result = self.nominations.schedule(request, snapshot, self.framework_for(entry))
        if isinstance(result, Failure):
            if why:
                result = replace(result, message=f"{why}: {result.message}")
            await self._failed(entry, result, snapshot, request)
            return result
        assert isinstance(request, PodRequest)
        self.view.assume(request, result.node, result.placement, result.claims)
        self._record(entry, "binding", result, f"binding to {result.node}")
        self.stats.placed += 1
        await self.binder.submit(self.bind_job(entry, request, result))
        return result

    async def _failed(
        self,
        entry: QueuedPod,
        failure: Failure,
        snapshot: Snapshot,
        request: PodRequest | PodSpecError,
    ) -> None:
        """``request``: what was scheduled (the pod, or a :class:`Narrowed` form of it)."""
        # its own spec, or its scheduling gates: only an edit can help
        spec_error = isinstance(request, PodSpecError) or bool(request.scheduling_gates)
        message = failure.message
        if isinstance(request, PodRequest):
            for hook in self.post_filter:
                try:
                    note = await hook(request, failure, snapshot)
                except Exception:
                    log.exception("post-filter hook failed for %s", entry.key)
                    continue
                if note:
                    message = f"{message} {note}"
        if spec_error:
            self.stats.invalid += 1
        else:
            self.stats.unschedulable += 1
        self._record(entry, "invalid" if spec_error else "unschedulable", failure, message)
        framework = self.framework_for(entry)
        self.queue.failed(
            entry,
            message=message,
            spec_error=spec_error,
            gated=failure.gated,
            waits_for=framework.waits_for(failure),
            refused_by=framework.refused_by(failure),
        )
        if not (isinstance(request, PodRequest) and request.scheduling_gates):
            self._explain_failure(entry, message)  # gated: the API server's SchedulingGated holds

    def _explain_failure(self, entry: QueuedPod, message: str) -> None:
        grace = self.inventory.grace_left_s()
        if grace > 0:
            # Nodes may still gain a topology when the agents' start-up grace ends: every pod is
            # tried again then, and explained if it still does not fit. Writing now would cost a
            # FailedScheduling Event and a status patch per pending GPU pod at every restart.
            if self._grace_retry is None:
                self._grace_retry = asyncio.get_running_loop().call_later(grace, self._grace_over)
            return
        pod = PodRef.of(entry.obj)
        now = self._clock()
        forecast = self.forecasts.stated(entry.key) if self.forecasts is not None else None
        if forecast is not None and forecast.uid and forecast.uid != entry.uid:
            forecast = None  # an earlier pod of that name
        last = self._posted.get(entry.uid)
        if last is not None and last.message == message and last.forecast is forecast:
            # The condition says it already (kube-scheduler writes it only when it changes): the
            # attempt is counted on the Event, at most once per ``failure_repost_s``.
            if now - last.counted >= self.settings.failure_repost_s:
                last.counted = now
                event = self.writer.event(
                    pod, reason=REASON_FAILED, message=last.text, event_type="Warning"
                )
                self._background(event, f"explain {pod.key}")
            return
        raw = message
        if forecast is not None and forecast.unknown:
            # Its reason is a refusal of the pod's claims: already stated, or no longer true
            # (the claim made or bound since the forecast) and then not repeated.
            if forecast.unknown in message:
                message = f"{message}; start unknown"
        elif forecast is not None:
            message = f"{message}; {forecast.sentence(self._wall(), clock=True)}"
        self._posted[entry.uid] = _Posted(raw, now, forecast, message, now)
        nominated = self._nominating.pop(entry.uid, None)
        if nominated is not None:
            # One pods/status patch for both, as kube-scheduler's: urgent, as the nomination is.
            coro = self._explain(pod, message, nominated=nominated[1])
            self._background(coro, f"nominate and explain {pod.key}", urgent=True)
        else:
            self._background(self._explain(pod, message), f"explain {pod.key}")

    async def _explain(self, pod: PodRef, message: str, *, nominated: str = "") -> None:
        """``PodScheduled=False`` (with ``nominated``, the nomination too), then the
        ``FailedScheduling`` Event: in the same write slot, or (after a nomination, which is
        urgent) as a write of its own that waits its turn behind urgent ones."""
        if not await self.writer.explain(pod, message, nominated=nominated):
            return  # bound meanwhile, re-created or gone: nothing to tell
        event = self.writer.event(pod, reason=REASON_FAILED, message=message, event_type="Warning")
        if nominated:
            self._background(event, f"explain {pod.key}")
        else:
            await event

    def restate(self, keys: Iterable[str]) -> None:
        """The stated forecasts of these pending pods changed: write their ``PodScheduled``
        message again with it — the first at once, a change at most once per
        :data:`STATE_EVERY_S` per pod (it waits for its turn) — never for a pod not explained
        yet, being bound or bound."""
        wanted = set(keys)
        for entry in self.queue.entries():
            if entry.key in wanted:
                self._restate(entry.uid)

    def _restate(self, uid: str) -> None:
        self._restating.discard(uid)
        entry = self.queue.entry(uid)
        if entry is None or entry.where in ("bound", "in_flight") or not entry.last_message:
            return
        last = self._posted.get(uid)
        if last is None:
            return  # never explained: its first explanation will state it
        wait = last.at + STATE_EVERY_S - self._clock()
        stated = self.forecasts.stated(entry.key) if self.forecasts is not None else None
        if last.forecast is None and (stated is None or not stated.blind):
            # Its first forecast completes the explanation: stated at once. A blind one (no
            # start only because running pods declare no end: in most clusters, every pod's)
            # waits its turn, or rides with the next explanation: one write fewer per pod.
            wait = 0.0
        if wait > 0:
            if uid not in self._restating:
                self._restating.add(uid)
                asyncio.get_running_loop().call_later(wait, self._restate, uid)
            return
        if self.forecasts is not None and last.forecast is stated:
            return  # stated already
        self._explain_failure(entry, last.message)

    def warn(self, pod: PodRef, reason: str, message: str) -> None:
        """A Warning Event on ``pod``, written in the background."""
        coro = self.writer.event(pod, reason=reason, message=message, event_type="Warning")
        self._background(coro, f"{reason} event on {pod.key}")

    def _background(
        self, coro: Coroutine[Any, Any, None], what: str, *, urgent: bool = False
    ) -> None:
        """``urgent`` writes (evictions) go first: while any, or a preemptor's bind, is waiting or
        on the wire, the others wait to start (sharing the API server with 1,500 Events and
        explanations, the 500 evictions and binds of a whole-cluster reclaim took seconds
        longer)."""
        slots = self._urgent_slots if urgent else self._write_slots
        if urgent:
            self.hold_writes()

        async def run() -> None:
            try:
                async with slots:
                    if not urgent:
                        await self._calm.wait()
                    await coro
            except ClusterError as exc:
                self.stats.write_errors += 1
                log.warning("%s: %s", what, exc)
            except Exception:
                self.stats.write_errors += 1
                log.exception("%s failed", what)
            finally:
                if urgent:
                    self.release_writes()

        task = asyncio.create_task(run(), name=what)
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def hold_writes(self) -> None:
        """Something urgent is under way (an eviction or a preemptor's bind waiting or on the
        wire, a gang's reclaim between its evictions and its binds): the other background
        writes wait to start until :meth:`release_writes` has answered every hold."""
        self._urgent += 1
        self._calm.clear()

    def release_writes(self) -> None:
        self._urgent -= 1
        if not self._urgent:
            self._calm.set()

    # --- bind outcomes -------------------------------------------------------------------------

    def _bound(self, job: BindJob) -> None:
        key = job.request.key
        if self.outage.ongoing:
            failed = self.outage.answered()
            log.warning("the API server answers again (%d binds failed meanwhile)", failed)
        self.view.bind_done(job.entry.uid)
        self.nominations.bound(
            job.request.uid, job.decision.node, group=placement_group(job.request)
        )
        self.queue.done(job.entry)
        self._posted.pop(job.entry.uid, None)
        self.stats.bound += 1
        node = self.inventory.scheduling_node(job.decision.node)
        message = scheduled_message(job.pod, job.decision, node.topology if node else None)
        self._record(job.entry, "bound", job.decision, message)
        self._background(self.writer.record_scheduled(job.pod, message), f"event {key}")
        self._tell_bind_listeners(job, None)

    def _bind_failed(self, job: BindJob, exc: ClusterError) -> None:
        key = job.request.key
        self.view.release(job.entry.uid)
        if isinstance(exc, BindConflict):
            self.stats.bind_conflicts += 1
            log.info("bind of %s lost: %s", key, exc)
        else:
            self.stats.bind_errors += 1
            log.warning("bind of %s failed: %s", key, exc)
        if isinstance(exc, NoAnswer):
            wait = self.outage.failed(self._clock())
            if wait is not None:
                log.warning(
                    "the API server does not answer: no scheduling cycle for %g s "
                    "(the wait doubles, up to %g s, until a bind succeeds)",
                    wait,
                    MAX_WAIT_S,
                )
        self._record(job.entry, "bind-failed", job.decision, str(exc))
        self.queue.retry(job.entry)  # a no-op if the watch already dropped the pod
        self._tell_bind_listeners(job, exc)

    def _tell_bind_listeners(self, job: BindJob, exc: ClusterError | None) -> None:
        for listener in self.bind_listeners:
            try:
                listener(job, exc)
            except Exception:
                log.exception("bind listener failed for %s", job.request.key)

    # --- for steps outside the per-pod path (gangs_runtime) ------------------------------------

    def report(
        self,
        entry: QueuedPod,
        outcome: Outcome,
        result: ScheduleResult,
        message: str,
        *,
        explain: bool = False,
    ) -> None:
        """Remember an attempt decided by a :data:`PodStep` (what explain shows); ``explain``
        also posts ``message`` as a ``FailedScheduling`` Event and ``PodScheduled=False``."""
        self._record(entry, outcome, result, message)
        if explain:
            self._explain_failure(entry, message)

    def bind_job(self, entry: QueuedPod, request: PodRequest, decision: Decision) -> BindJob:
        """What the binder does for a decision: its DRA claims (see :mod:`.claims`), the bind."""
        claims = claims_to_write(request, decision, self.view.dra)
        preemptor = self.nominations.node_of(request.uid) is not None
        return BindJob(entry, request, decision, claims, urgent=preemptor)

    def nominate(self, pod: PodRef, node: str, alone: Nominate) -> None:
        """Write ``pod``'s nomination for ``node``, urgent (ahead of Events and explanations).
        Made during an attempt, it waits for the attempt's end: a pod the attempt explains gets
        the nomination and the explanation in one ``pods/status`` patch (as kube-scheduler's
        one write for a preemptor), any other its nomination ``alone``."""
        if self._attempt_began is None or not pod.uid:
            self.write(alone(pod, node), f"nominate {pod.key}", urgent=True)
        else:
            self._nominating[pod.uid] = (pod, node, alone)

    def write(self, coro: Coroutine[Any, Any, None], what: str, *, urgent: bool = False) -> None:
        """Run a cluster write in the background (bounded, errors logged and counted);
        ``urgent``: one that frees room a pod waits for (an eviction), in a pool of its own that
        Events and explanations never hold up."""
        self._background(coro, what, urgent=urgent)

    # --- explanations and what-if --------------------------------------------------------------

    def _record(
        self, entry: QueuedPod, outcome: Outcome, result: ScheduleResult, message: str
    ) -> None:
        profile = self.framework_for(entry).name
        attempt = Attempt(entry.key, entry.uid, self._wall(), outcome, result, message, profile)
        try:
            self.observer.attempt(entry, outcome, began=self._attempt_began, now=self._clock())
        except Exception:
            log.exception("scheduling observer failed for %s", entry.key)
        self._attempts.record(attempt)

    def last_attempt(self, pod_key: str) -> Attempt | None:
        """The latest attempt of the newest pod tried under ``namespace/name``."""
        return self._attempts.last(pod_key)

    @contextlib.contextmanager
    def dry_run(self) -> Iterator[None]:
        """Cycles run inside change no profile: the node scan starts where it would have and
        the shape mix learns nothing (``Framework.dry_run``): what-if, simulate, explain."""
        with contextlib.ExitStack() as stack:
            for framework in self._profiles:
                stack.enter_context(framework.dry_run())
            yield

    def plan(
        self, pods: Iterable[Mapping[str, Any]], snapshot: Snapshot | None = None
    ) -> list[ScheduleResult]:
        """Where would these pods go, in order, each seeing the ones before? Runs on a copy of
        the snapshot: nothing is assumed, reserved, written or learnt."""
        with self.dry_run():
            return self._plan(pods, snapshot)

    def _plan(
        self, pods: Iterable[Mapping[str, Any]], snapshot: Snapshot | None
    ) -> list[ScheduleResult]:
        copy = (snapshot or self.view.snapshot()).copy()
        out: list[ScheduleResult] = []
        for obj in pods:
            request = parse_pod(obj)
            result = schedule_one(request, copy, self._profiles.for_pod(obj))
            if isinstance(result, Decision) and isinstance(request, PodRequest):
                try:
                    copy.assume(request, result.node, result.placement, result.claims)
                except ValueError:  # the same pod twice in one batch
                    result = Failure(
                        request.key, result.evaluated, {}, f"pod {request.key} appears twice"
                    )
            out.append(result)
        return out

    def explain_now(self, entry: QueuedPod) -> ScheduleResult:
        """A fresh dry run for a queued pod (nothing changes)."""
        snapshot = self.nominations.snapshot_for(entry.request, self.view.snapshot())
        with self.dry_run():
            return schedule_one(entry.request, snapshot.copy(), self.framework_for(entry))

    # --- waiting for quiet (tests, benchmarks, the demo) ---------------------------------------

    async def drain(self) -> None:
        """Wait for every submitted bind and background write."""
        await self.binder.drain()
        while self._writes:
            await asyncio.gather(*tuple(self._writes), return_exceptions=True)


def _profiles(given: Framework | Profiles | None) -> Profiles:
    if isinstance(given, Profiles):
        return given
    return Profiles((given,)) if given is not None else build_profiles()
