"""The scheduling queue: which pending pod to try next (pure, time injected).

Three places a pod can wait, as in kube-scheduler:

- **active** — ready now, ordered by priority (highest first), then creation time, then arrival;
- **backoff** — failed recently, ready again at ``backoff_until`` (1 s doubling to 10 s by default).
  When no active pod is ready, :meth:`SchedulingQueue.pop` takes the backoff pod whose backoff
  ends soonest at once (kube-scheduler's ``SchedulerPopFromBackoffQ``, on by default since 1.33):
  the backoff only keeps a pod from going ahead of others, never idles the scheduler. Not a pod
  backing off after :meth:`SchedulingQueue.retry` (an API error, a lost bind race, a pod still
  being bound: kube's error backoff), which waits its backoff out. And once a pod taken early
  found no node, no pod is taken early until a change sends pods back again: under churn (pods
  deleted one by one while hundreds wait, each deletion waking them) every waiting pod tried
  early after every change would be refused again and again — 55,000 attempts for 2,960 pods
  in upstream's EventHandlingPodDelete, where a busy kube-scheduler's queue is never empty — while
  a change that lets one pod in (a pod its spread or affinity waits for bound) still gets a
  waiting pod tried at once (EventHandlingPodAdd). The others wait their backoff out or the next
  change;
- **unschedulable** — the last attempt found no node. It leaves when the cluster changes (a node
  gains capacity, a pod ends: :meth:`SchedulingQueue.cluster_changed`), when the pod itself is
  edited, or after ``unschedulable_flush_s`` as a safety net. A pod rejected for its own spec
  (bad annotation, malformed quantity) leaves only when it is edited: no cluster change can fix it.

A pod may also be held back before it is ever tried (kube-scheduler's PreEnqueue): ``gate``
says why a pod is not ready to be tried (a ResourceClaim it names does not exist yet); such a pod
is parked with the unschedulable ones, waiting for a DRA claim change (``waits_for`` "claim"),
without an attempt — so no FailedScheduling is posted for it — and comes back at the next one.

A popped pod is *in flight* until the loop reports :meth:`done`, :meth:`failed` or :meth:`retry`;
watch updates meanwhile only refresh the stored object, so our own status writes never re-queue
a pod, and an edit made while it was in flight is honoured when it comes back. A pod reported
:meth:`done` (bound) stays, inert, until the watch says it is no longer pending (:meth:`delete`):
the watch may still deliver updates from before the binding, which must not queue it again.

Pods are identified by UID (:func:`pod_uid`), never by name: a pod deleted and created again
under the same name is a new pod, and its predecessor leaves the queue the moment the new one
arrives. ``on_removed`` hears every pod that leaves, and whether it is *gone* (deleted, or
replaced under its name) or only no longer pending (bound), so the scheduler can drop what it
held for it at once.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod

__all__ = ["QueueSettings", "QueuedPod", "SchedulingQueue", "pod_key", "pod_uid"]

Where = Literal["active", "backoff", "unschedulable", "in_flight", "bound"]
_FAR: Final = float("inf")


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSettings:
    initial_backoff_s: float = 1.0
    """Wait after the first failed attempt; doubles with each further failure."""
    max_backoff_s: float = 10.0
    """Cap on the backoff."""
    unschedulable_flush_s: float = 60.0
    """An unschedulable pod is retried after this long even if nothing seemed to change."""
    pop_from_backoff: bool = True
    """With no active pod ready, try the backoff pod whose backoff ends soonest at once
    (kube-scheduler's ``SchedulerPopFromBackoffQ``); ``False``: every backoff is waited out."""


def pod_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def pod_uid(obj: Mapping[str, Any]) -> str:
    """A pod's identity: its UID. A pod object without one (hand-written what-ifs and tests;
    the API server always sets it) is identified by its namespace/name."""
    return str((obj.get("metadata") or {}).get("uid") or "") or pod_key(obj)


def _fingerprint(obj: Mapping[str, Any]) -> tuple[object, ...]:
    """What a user edit (or the DRA claim controller) can change that matters to scheduling."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return (
        meta.get("labels"),
        meta.get("annotations"),
        obj.get("spec"),
        status.get("resourceClaimStatuses"),  # claims created from templates
        status.get("extendedResourceClaimStatus"),
    )


def _scheduler_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("spec") or {}).get("schedulerName") or "default-scheduler")


@dataclass(slots=True)
class QueuedPod:
    key: str  # namespace/name, for messages and lookups by name
    uid: str  # the identity (:func:`pod_uid`)
    obj: Mapping[str, Any]
    request: PodRequest | PodSpecError
    created: str
    seq: int
    where: Where = "active"
    attempts: int = 0
    backoff_until: float = 0.0
    unschedulable_since: float = 0.0
    needs_update: bool = False  # rejected for its own spec: only an edit can help
    #: what can help it after a failure: "any" change; "dra": devices freed (claims released,
    #: slices or classes changed) or nodes changed; "claim": any DRA change (a claim it names)
    waits_for: str = "any"
    #: the plugins whose refusal a pod change may lift (``Requeue.ANY``) that refused it on its
    #: last attempt; ``None``: not known (any change that gains room may help it)
    refused_by: frozenset[str] | None = None
    moved_while_in_flight: bool = False  # edited while being scheduled
    after_error: bool = False  # backing off after retry(): waits it out (kube's error backoff)
    #: its last attempt was taken from the backoff before its end (if it failed, no pod is taken
    #: early again before the next change that sends pods back)
    early: bool = False
    generation: int = 0  # bumped whenever it moves; stale heap entries are skipped
    last_message: str = field(default="", repr=False)

    @property
    def priority(self) -> int:
        return self.request.priority if isinstance(self.request, PodRequest) else 0


class SchedulingQueue:
    """Event-loop only; ``notify`` is called whenever a pod may have become ready."""

    def __init__(
        self,
        settings: QueueSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        notify: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings or QueueSettings()
        self._clock = clock
        self.notify: Callable[[], None] = notify or (lambda: None)
        #: Told about every pod that leaves, with ``gone``: deleted or replaced under its name
        #: (``True``), or only no longer pending, i.e. bound (``False``).
        self.on_removed: Callable[[QueuedPod, bool], None] = lambda pod, gone: None
        #: Told about every pod the feed adds or updates (``True``) and removes (``False``):
        #: the engine's nominations read ``status.nominatedNodeName`` here.
        self.listeners: list[Callable[[QueuedPod, bool], None]] = []
        #: PreEnqueue: why a pod is not ready to be tried (``None``: it is); asked as it is popped.
        self.gate: Callable[[QueuedPod], str | None] = lambda pod: None
        #: Pods the gate parked since start (a figure for benchmarks and metrics).
        self.gated = 0
        self._pods: dict[str, QueuedPod] = {}  # uid → pod
        self._names: dict[str, str] = {}  # namespace/name → uid of the pod under that name
        self._active: list[tuple[int, str, int, int, str]] = []  # (-prio, created, seq, gen, uid)
        # (until, -prio, created, seq, gen, uid): backoffs ending together in the active order
        self._backoff: list[tuple[float, int, str, int, int, str]] = []
        self._error_backoff: list[tuple[float, int, str]] = []  # (until, gen, uid): after retry()
        self._unschedulable: list[tuple[float, int, str]] = []  # (since, gen, uid)
        # uid → gen of the pods parked as unschedulable, walked by ``cluster_changed``: the heap
        # also holds the entries of earlier parkings (dropped only at their flush time), many
        # per pod when a change wakes a backlog over and over.
        self._parked: dict[str, int] = {}
        self._seq = 0
        # Cluster-wide changes seen, and how many had been seen when the current attempt began:
        # a failure decided on an older view retries after its backoff instead of parking, or it
        # would miss room freed while it was being decided (kube-scheduler's moveRequestCycle).
        self._changes = 0
        self._attempt_basis = 0
        # Pods sent back by changes so far (``cluster_changed`` calls that moved one), the count
        # when the current attempt began, and the count when a pod taken early from the backoff
        # last failed: no pod is taken early again until a change sends pods back after that.
        self._wakes = 0
        self._attempt_wakes = 0
        self._early_failed_at = -1

    # --- reading -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def entry(self, uid: str) -> QueuedPod | None:
        """The pod with this identity (:func:`pod_uid`), if it waits here."""
        return self._pods.get(uid)

    def named(self, key: str) -> QueuedPod | None:
        """The pod now waiting under ``namespace/name`` (explanations are asked for by name)."""
        uid = self._names.get(key)
        return None if uid is None else self._pods.get(uid)

    def entries(self) -> Iterator[QueuedPod]:
        return iter(tuple(self._pods.values()))

    def count(self, where: Where) -> int:
        return sum(1 for p in self._pods.values() if p.where == where)

    @property
    def changes(self) -> int:
        """Cluster-wide changes seen so far: an attempt spanning several pods (a gang) notes it
        when it begins and hands it to :meth:`failed` as ``basis``."""
        return self._changes

    @property
    def pending(self) -> int:
        """Pods still to place (everything but those bound and awaiting the watch)."""
        return sum(1 for p in self._pods.values() if p.where != "bound")

    # --- moving ---------------------------------------------------------------------------------

    def _to_active(self, pod: QueuedPod) -> None:
        pod.where = "active"
        pod.generation += 1
        heapq.heappush(self._active, (-pod.priority, pod.created, pod.seq, pod.generation, pod.uid))

    def _to_backoff(self, pod: QueuedPod) -> None:
        if pod.backoff_until <= self._clock():
            self._to_active(pod)
            return
        pod.where = "backoff"
        pod.generation += 1
        if pod.after_error:
            heapq.heappush(self._error_backoff, (pod.backoff_until, pod.generation, pod.uid))
        else:
            until = pod.backoff_until
            heapq.heappush(
                self._backoff, (until, -pod.priority, pod.created, pod.seq, pod.generation, pod.uid)
            )

    def add(self, obj: Mapping[str, Any]) -> None:
        """A pending pod appeared or changed (a watch event)."""
        key = pod_key(obj)
        meta = obj.get("metadata") or {}
        uid = pod_uid(obj)
        before = self._names.get(key)
        if before is not None and before != uid:
            # Recreated under the same name: the old pod is gone, this is a new one.
            self._remove(self._pods[before], gone=True)
        pod = self._pods.get(uid)
        if pod is None:
            self._seq += 1
            pod = QueuedPod(
                key=key,
                uid=uid,
                obj=obj,
                request=parse_pod(obj),
                created=str(meta.get("creationTimestamp") or ""),
                seq=self._seq,
            )
            self._pods[uid] = pod
            self._names[key] = uid
            self._to_active(pod)
            self._tell(pod, True)
            self.notify()
            return
        changed = _fingerprint(pod.obj) != _fingerprint(obj)
        pod.obj = obj
        if changed:
            pod.request = parse_pod(obj)
        self._tell(pod, True)
        if not changed:
            return  # status-only (our own condition) or a no-op update
        if pod.where == "bound":
            return
        if pod.where == "in_flight":
            pod.moved_while_in_flight = True
            return
        if pod.where in ("unschedulable", "backoff"):
            pod.needs_update = False
            if pod.where == "unschedulable":
                self._to_backoff(pod)
            self.notify()
        elif pod.where == "active":
            self._to_active(pod)  # its priority may have changed: re-sort
            self.notify()

    def delete(self, obj: Mapping[str, Any], *, gone: bool) -> QueuedPod | None:
        """The watch says the pod is no longer pending; it leaves wherever it waits. ``gone``:
        the pod is known to be deleted (or being deleted) and can never be bound; ``False`` when
        it was bound, or when the feed cannot tell (a field-selector watch sends ``DELETED``
        with the last matching object both when the pod is bound and when it is deleted)."""
        pod = self._pods.get(pod_uid(obj))
        if pod is not None:
            self._remove(pod, gone=gone)
        return pod

    def replace(
        self, objs: Iterable[Mapping[str, Any]], *, scheduler_name: str | None = None
    ) -> None:
        """A (re-)list of every pending pod — of ``scheduler_name`` only, when given (one watch
        per profile: a list of one profile's pods says nothing of another's): pods not listed
        left (bound or deleted, which is not known: anything held for them stays until their
        bind outcome or the inventory settles it); pods in flight stay until their attempt
        reports."""
        objs = list(objs)
        keep = {pod_uid(obj) for obj in objs}
        for pod in tuple(self._pods.values()):
            if pod.uid in keep or pod.where == "in_flight":
                continue
            if scheduler_name is None or _scheduler_name(pod.obj) == scheduler_name:
                self._remove(pod, gone=False)
        for obj in objs:
            self.add(obj)

    def _remove(self, pod: QueuedPod, *, gone: bool) -> None:
        del self._pods[pod.uid]
        if self._names.get(pod.key) == pod.uid:
            del self._names[pod.key]
        pod.generation += 1
        self.on_removed(pod, gone)
        self._tell(pod, False)

    def _tell(self, pod: QueuedPod, present: bool) -> None:
        for listener in self.listeners:
            listener(pod, present)

    def pop(self) -> QueuedPod | None:
        """The next pod to try, now in flight; ``None`` if none is ready. With no active pod,
        the backoff pod whose backoff ends soonest (not one after :meth:`retry`), unless
        :attr:`QueueSettings.pop_from_backoff` is off."""
        self._release_due()
        while True:
            if self._active:
                _, _, _, gen, uid = heapq.heappop(self._active)
                pod = self._pods.get(uid)
                if pod is None or pod.generation != gen or pod.where != "active":
                    continue
                pod.early = False
            else:
                pod = self._backoff_head()
                if pod is None:
                    return None
                heapq.heappop(self._backoff)
                pod.early = True
            why = self.gate(pod)
            if why is not None:
                self._park(pod, why)
                continue
            pod.where = "in_flight"
            pod.generation += 1
            pod.moved_while_in_flight = False
            self._attempt_basis = self._changes
            self._attempt_wakes = self._wakes
            return pod

    def _backoff_head(self) -> QueuedPod | None:
        """The backoff pod :meth:`pop` may take early (its entry heads ``_backoff``), if any."""
        if not self.settings.pop_from_backoff or self._early_failed_at == self._wakes:
            return None
        while self._backoff:
            *_, gen, uid = self._backoff[0]
            pod = self._pods.get(uid)
            if pod is not None and pod.generation == gen and pod.where == "backoff":
                return pod
            heapq.heappop(self._backoff)  # stale: the pod moved on since
        return None

    def _park(self, pod: QueuedPod, why: str) -> None:
        """Held back by the gate: back at the next DRA claim change, with no backoff and no
        attempt counted."""
        now = self._clock()
        pod.where = "unschedulable"
        pod.generation += 1
        pod.waits_for = "claim"
        pod.refused_by = None
        pod.last_message = why
        pod.backoff_until = now
        pod.unschedulable_since = now
        pod.needs_update = False
        pod.after_error = False
        self.gated += 1
        heapq.heappush(self._unschedulable, (now, pod.generation, pod.uid))
        self._parked[pod.uid] = pod.generation

    def _release_due(self) -> None:
        now = self._clock()
        while self._backoff and self._backoff[0][0] <= now:
            *_, gen, uid = heapq.heappop(self._backoff)
            pod = self._pods.get(uid)
            if pod is not None and pod.generation == gen and pod.where == "backoff":
                self._to_active(pod)
        while self._error_backoff and self._error_backoff[0][0] <= now:
            _, gen, uid = heapq.heappop(self._error_backoff)
            pod = self._pods.get(uid)
            if pod is not None and pod.generation == gen and pod.where == "backoff":
                self._to_active(pod)
        flush = self.settings.unschedulable_flush_s
        while self._unschedulable and self._unschedulable[0][0] + flush <= now:
            _, gen, uid = heapq.heappop(self._unschedulable)
            pod = self._pods.get(uid)
            if (
                pod is not None
                and pod.generation == gen
                and pod.where == "unschedulable"
                and not pod.needs_update
            ):
                self._to_active(pod)

    def next_ready_in(self) -> float | None:
        """Seconds until a waiting pod becomes ready by itself (``None``: nothing scheduled);
        0 when :meth:`pop` would take a backoff pod early."""
        if self._backoff_head() is not None:
            return 0.0
        now = self._clock()
        soonest = _FAR
        if self._backoff:
            soonest = self._backoff[0][0]
        if self._error_backoff:
            soonest = min(soonest, self._error_backoff[0][0])
        if self._unschedulable:
            soonest = min(soonest, self._unschedulable[0][0] + self.settings.unschedulable_flush_s)
        if soonest == _FAR:
            return None
        return max(0.0, soonest - now)

    # --- outcomes of an attempt -----------------------------------------------------------------

    def _backoff_s(self, attempts: int) -> float:
        s = self.settings
        # The exponent is capped: a pod tried a thousand times (a gang waiting all day) would
        # overflow a float, and 2**62 × any initial backoff is past every max_backoff_s already.
        doublings = min(max(0, attempts - 1), 62)
        return float(min(s.max_backoff_s, s.initial_backoff_s * 2**doublings))

    def done(self, pod: QueuedPod) -> None:
        """Bound: it stays inert until the watch drops it (:meth:`delete`)."""
        if self._pods.get(pod.uid) is pod:
            pod.where = "bound"
            pod.generation += 1

    def failed(
        self,
        pod: QueuedPod,
        *,
        message: str = "",
        spec_error: bool = False,
        basis: int | None = None,
        gated: bool = False,
        waits_for: str = "any",
        refused_by: frozenset[str] | None = None,
    ) -> None:
        """No node fits: wait for the cluster to change (or for an edit, on a spec error).

        ``basis``: :attr:`changes` when the attempt that failed began (default: when the last pod
        was popped); if the cluster changed since, the pod retries after its backoff instead.
        ``gated``: it waits for an object another controller makes (a claim from its template);
        the next change sends it back at once, with no backoff (kube-scheduler's PreEnqueue).
        ``waits_for``: which changes send it back (:attr:`QueuedPod.waits_for`); ``refused_by``:
        the plugins that refused it (:attr:`QueuedPod.refused_by`)."""
        if self._pods.get(pod.uid) is not pod:
            return  # deleted meanwhile
        now = self._clock()
        pod.attempts += 1
        pod.after_error = False
        if pod.early:
            self._early_failed_at = self._attempt_wakes
        # Pods only the changes that may help them wake ("dra", "claim") need no backoff: a
        # failed retry must not make them miss the next freed device (kube pops them at once).
        quiet = gated or waits_for != "any"
        pod.backoff_until = now if quiet else now + self._backoff_s(pod.attempts)
        pod.waits_for = waits_for
        pod.refused_by = refused_by
        pod.last_message = message
        began = self._attempt_basis if basis is None else basis
        stale_view = not spec_error and self._changes != began
        if pod.moved_while_in_flight or stale_view:
            pod.needs_update = False
            self._to_backoff(pod)
            self.notify()
            return
        pod.where = "unschedulable"
        pod.generation += 1
        pod.unschedulable_since = now
        pod.needs_update = spec_error
        if not spec_error:
            heapq.heappush(self._unschedulable, (now, pod.generation, pod.uid))
            self._parked[pod.uid] = pod.generation

    def retry(self, pod: QueuedPod) -> None:
        """A transient problem (API error, lost bind race): try again after a backoff."""
        if self._pods.get(pod.uid) is not pod:
            return
        pod.attempts += 1
        pod.after_error = True
        pod.backoff_until = self._clock() + self._backoff_s(pod.attempts)
        self._to_backoff(pod)
        self.notify()

    def cluster_changed(
        self,
        only: Callable[[QueuedPod], bool] | None = None,
        *,
        counts: bool = False,
        at_once: bool = False,
    ) -> int:
        """Something changed that may let unschedulable pods fit (all of them, or those ``only``
        selects): they go back, after their backoff. Returns how many moved. A change for all
        (or ``counts``) also sends back an attempt in flight that fails on the older view.
        ``at_once``: with no backoff, those waiting one out included (what they waited for is
        there: a preemptor's victims are gone)."""
        if only is None or counts:
            self._changes += 1
        moved = 0
        now = self._clock()
        if at_once:
            backing_off = [e[-2:] for e in self._backoff] + [e[-2:] for e in self._error_backoff]
            for gen, uid in backing_off:
                pod = self._pods.get(uid)
                if pod is None or pod.generation != gen or pod.where != "backoff":
                    continue
                if only is None or only(pod):
                    pod.backoff_until = now
                    self._to_active(pod)
                    moved += 1
        # The unschedulable pods are those parked whose entry is current (pods with a spec error
        # are never parked): not a walk over every pod queued or bound.
        parked = self._parked
        for uid, gen in tuple(parked.items()):
            pod = self._pods.get(uid)
            if pod is None or pod.generation != gen or pod.where != "unschedulable":
                del parked[uid]  # moved on since
                continue
            if pod.needs_update or (only is not None and not only(pod)):
                continue
            if at_once:
                pod.backoff_until = min(pod.backoff_until, now)
            del parked[uid]
            self._to_backoff(pod)
            moved += 1
        if moved:
            self._wakes += 1
            self.notify()
        return moved
