"""Predicted starts of the live cluster's pending pods, refreshed off the scheduling path.

:class:`LiveForecaster` copies what the running scheduler knows — the inventory's nodes (Node
object and agent topology), its bound pods (any scheduler's, with their GPUs), the pending queue
in the scheduler's order — into a :class:`~coordinator.forecast.predict.ClusterCopy`, runs the
engine forward on it in an executor (the app's: a worker process;
:func:`~coordinator.forecast.predict.predict_starts` on its own simulated loop and its own
profiles, built from the same configuration: nothing of the live scheduler is shared), and
publishes the answers through :class:`~coordinator.engine.forecasts.Forecasts`. Only the copy
is made on the event loop.

When: only while some pod waits after an attempt could not place it (a pod not tried yet is mostly
bound at once: it calls for no forecast; nor does one the queue holds back before its first attempt
because a claim made from its template does not exist yet) — then after the cluster changed (a node
or bound pod, or the pending queue) and at most once per ``interval_s`` (60 s), and also when a
forecast's start has passed without the pod starting (a runtime ran over); and when a waiting pod
has no forecast yet, once it has waited a poll: at the first poll ``poll_s`` (5 s) or more after
the poll that first saw it waiting — the next one, 5–10 s after its failed attempt. Most pods
that fail once wait only for a node or pod event that comes within seconds (scheduler_perf's
EventHandling cases: a pod fails, and is bound a second later): a forecast at the first poll
started the worker process (~1 s of CPU to spawn and import) and ran the cluster forward for a
wait already over. The poll is the unit the forecaster already counts in (no setting of its own:
a shorter wait is one a poll may not even see), and a pod that keeps waiting has its forecast by
the second poll after it failed (unless a stream being placed puts it off, as below). A pod that
has waited less may still get its forecast from a refresh made for pods already forecast (the
run covers the whole queue). A pod's forecast younger than ``interval_s`` is kept as it is, so
each pod's forecast changes at most once a minute. However due, a refresh also waits until the
last one's forward run, ``t`` seconds, is ``t / cpu_share`` seconds behind its start (a tenth of a
core, ``CPU_SHARE``: a 3 s run is followed by the next 30 s after it began at the earliest), so
the worker process never takes more than that share of a core on average, however fast pods come
and fail; new waiting pods then get their first forecast at that run. While pods are still to be
tried for the first time or being placed (a stream being scheduled: the copy would be stale within
the second, and the forward run would place them all again), a due refresh waits for them,
``interval_s`` at most. Pods whose stated forecast moved are handed to ``restate`` (the scheduler
re-writes their ``PodScheduled`` message: :meth:`coordinator.engine.loop.Scheduler.restate`).

How long each running pod still runs (:mod:`.runtimes`): its ``topos.io/expected-duration``
counted from when this process first saw it bound, else its Job's ``activeDeadlineSeconds``
from the Job's start (the Jobs the kube adapter watches: ``jobs``), else what
:class:`~.runtimes.RuntimeHistory` learned — fed here from real ends: a bound pod that ran to
its end (Succeeded or Failed on its own, :meth:`~coordinator.inventory.store.Inventory
.ran_to_end`) after this process saw it bound teaches its owner and shape its run time. A pod
deleted, preempted or evicted teaches nothing (it stopped early), nor do pods already running
when the forecaster started (their start is not known).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, get_args

from coordinator.core.framework.profiles import Profiles
from coordinator.core.podspec.intree import inline_source
from coordinator.core.snapshot.volumes import VolumeKind
from coordinator.engine.forecasts import Forecast, Forecasts
from coordinator.engine.loop import Scheduler
from coordinator.forecast.engine import EngineSettings
from coordinator.forecast.predict import (
    ClusterCopy,
    NodeCopy,
    Prediction,
    RunningCopy,
    predict_starts,
)
from coordinator.forecast.runtimes import (
    Runtime,
    RuntimeHistory,
    expected_duration,
    expected_runtime,
)
from coordinator.inventory.dra import DraKind
from coordinator.inventory.state import BoundPod, NodeState
from coordinator.inventory.store import InventoryEvent

__all__ = [
    "CPU_SHARE",
    "HORIZON_S",
    "INTERVAL_S",
    "LiveForecaster",
    "copy_of",
    "node_object",
    "pod_object",
]

log = logging.getLogger(__name__)

#: At most one refresh (each pod's forecast changes at most once) in this many seconds.
INTERVAL_S: Final = 60.0
#: How far ahead (simulated seconds) a forecast looks.
HORIZON_S: Final = 86_400.0
#: The share of one core the forward runs may take on average: after a run of ``t`` seconds the
#: next begins ``t / CPU_SHARE`` seconds after it began at the earliest.
CPU_SHARE: Final = 0.1
_RESOURCE_FIELDS: Final = frozenset({"pods"})
VOLUME_KINDS: Final[tuple[VolumeKind, ...]] = get_args(VolumeKind)
DRA_KINDS: Final[tuple[DraKind, ...]] = get_args(DraKind)


def _stamp(unix: float) -> str:
    return datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _quantity(resource: str, value: int) -> str:
    return f"{value}m" if resource == "cpu" else str(value)


def node_object(state: NodeState) -> dict[str, Any]:
    """The Node object the copy needs (labels, allocatable, taints, cordon, readiness); a node
    whose agent is silent is copied cordoned (the scheduler places nothing there)."""
    return {
        "metadata": {"name": state.name, "labels": dict(state.labels)},
        "spec": {
            "unschedulable": state.unschedulable or state.stale,
            "taints": [
                {"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})}
                for t in state.taints
            ],
        },
        "status": {
            "allocatable": {k: _quantity(k, v) for k, v in state.allocatable.items()},
            "conditions": [
                {"type": "Ready", "status": "False" if state.ready is False else "True"}
            ],
        },
    }


def pod_object(pod: BoundPod, *, started: float) -> dict[str, Any]:
    """A bound pod as a Pod object: what it holds (requests, GPUs by Topos's annotation, host
    ports, the PersistentVolumeClaims its volumes name, its inline in-tree volumes), its labels,
    scheduling annotations, affinity, owner (by UID) and start."""
    asks = {k: _quantity(k, v) for k, v in pod.requests.items() if k not in _RESOURCE_FIELDS}
    meta: dict[str, Any] = {
        "name": pod.name,
        "namespace": pod.namespace,
        "uid": pod.uid,
        "labels": dict(pod.labels),
        "annotations": dict(pod.annotations),
    }
    if pod.owner_uid:
        meta["ownerReferences"] = [
            {
                "kind": pod.owner_kind,
                "name": pod.owner_uid,
                "uid": pod.owner_uid,
                "controller": True,
            }
        ]
    container: dict[str, Any] = {
        "name": "main",
        "resources": {"requests": asks, "limits": dict(asks)},
    }
    if pod.host_ports:  # taken on its node until it ends
        container["ports"] = [
            {"containerPort": p.port, "hostPort": p.port, "protocol": p.protocol, "hostIP": p.ip}
            for p in pod.host_ports
        ]
    spec: dict[str, Any] = {
        "nodeName": pod.node,
        "schedulerName": pod.scheduler,
        "priority": pod.priority,
        "containers": [container],
    }
    if pod.affinity:
        spec["affinity"] = dict(pod.affinity)
    # A ReadWriteOncePod claim it uses is not another pod's until it ends; its volumes, claims'
    # and inline, count toward its node's CSI attach limit.
    volumes: list[dict[str, Any]] = [
        {"name": f"claim-{i}", "persistentVolumeClaim": {"claimName": claim}}
        for i, claim in enumerate(pod.volume_claims)
    ]
    volumes.extend(v for v in map(inline_source, pod.inline_volumes) if v is not None)
    if volumes:
        spec["volumes"] = volumes
    return {
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Running", "startTime": _stamp(started)},
    }


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def copy_of(
    scheduler: Scheduler,
    *,
    started: Callable[[BoundPod], float],
    left: Callable[[BoundPod, Mapping[str, Any]], Runtime],
    duration: Callable[[Mapping[str, Any]], Runtime],
    extra: Sequence[Mapping[str, Any]] = (),
    memo: dict[str, tuple[object, dict[str, Any]]] | None = None,
) -> ClusterCopy:
    """What ``scheduler`` knows, as a copy: the nodes it schedules onto, their bound
    pods (``started``: when each started; ``left``: how long it still runs), its queue in the
    scheduler's order (priority, then age) and ``extra`` after it (``duration``: how long each
    runs once started), the PersistentVolumeClaims, PVs and StorageClasses and the DRA objects
    its view holds (the objects themselves: they are replaced on a change, never edited).
    ``memo`` keeps the objects made, by node name and pod UID, for the next
    copy: a node or pod unchanged since (the inventory's values are immutable) is not made
    again."""
    memo = memo if memo is not None else {}
    seen: set[str] = set()

    def kept(key: str, value: object) -> dict[str, Any] | None:
        seen.add(key)
        found = memo.get(key)
        return found[1] if found is not None and found[0] is value else None

    inventory = scheduler.inventory
    nodes: list[NodeCopy] = []
    running: list[RunningCopy] = []
    bound: set[str] = set()
    for name in inventory.names():
        state = inventory.scheduling_node(name)
        if state is None or not scheduler.view.schedules_onto(state):
            continue  # no Node object, or not this scheduler's to fill (its node selector)
        node = kept(f"node/{name}", state)
        if node is None:
            node = node_object(state)
            memo[f"node/{name}"] = (state, node)
        nodes.append(NodeCopy(node, state.topology))
        for pod in inventory.bound_pods(name):
            obj = kept(f"pod/{pod.uid}", pod)
            if obj is None:
                obj = pod_object(pod, started=started(pod))
                memo[f"pod/{pod.uid}"] = (pod, obj)
            bound.add(f"{pod.namespace}/{pod.name}")
            running.append(RunningCopy(obj, left(pod, obj)))
    # A pod refused for its own spec starts only once edited: no forecast, and no room held in
    # the forward run.
    waiting = [e for e in scheduler.queue.entries() if e.key not in bound and not e.needs_update]
    waiting.sort(key=lambda e: (-e.priority, e.created, e.seq))
    pending = [*(e.obj for e in waiting), *extra]
    durations = {_key(o): duration(o) for o in pending}
    for key in [k for k in memo if k not in seen]:
        del memo[key]
    view = scheduler.view
    volumes = [(kind, obj) for kind in VOLUME_KINDS for obj in view.volumes.objects(kind).values()]
    dra = (
        []
        if view.dra.empty
        else [(kind, obj) for kind in DRA_KINDS for obj in view.dra.objects(kind).values()]
    )
    return ClusterCopy(
        nodes=nodes,
        running=running,
        pending=pending,
        durations=durations,
        volumes=volumes,
        dra=dra,
    )


def forward(
    state: ClusterCopy,
    pods: Sequence[str] | None,
    horizon_s: float,
    profiles: Callable[[], Profiles],
    settings: EngineSettings | None,
) -> dict[str, Prediction]:
    """One forward run, wherever the executor runs it (a thread, or another process: then every
    argument is pickled — ``profiles`` a module-level function or a ``functools.partial`` of one);
    its own profiles, its own simulated loop."""
    return predict_starts(state, pods, horizon_s=horizon_s, framework=profiles(), settings=settings)


class LiveForecaster:
    """Forecasts for ``scheduler``'s pending pods, published to ``forecasts``. ``profiles``
    builds the profiles a forward run uses (called where it runs: each run has its own);
    ``executor`` runs it (``None``: the loop's default thread pool; the app gives a process of
    its own, so the forward run never holds the event loop's interpreter lock); ``new_executor``
    makes another when that process has died under it (killed, out of memory: a broken pool would
    fail every later run), and :attr:`executor` is the one in use; ``restate`` gets
    the pods whose stated forecast changed; ``jobs``: the Job objects watched now (a running
    pod of a Job with ``activeDeadlineSeconds`` ends by its deadline, source ``deadline``)."""

    def __init__(
        self,
        scheduler: Scheduler,
        forecasts: Forecasts,
        *,
        profiles: Callable[[], Profiles],
        settings: EngineSettings | None = None,
        history: RuntimeHistory | None = None,
        interval_s: float = INTERVAL_S,
        poll_s: float = 5.0,
        horizon_s: float = HORIZON_S,
        cpu_share: float = CPU_SHARE,
        restate: Callable[[Sequence[str]], None] | None = None,
        wall: Callable[[], float] = time.time,
        executor: concurrent.futures.Executor | None = None,
        new_executor: Callable[[], concurrent.futures.Executor] | None = None,
        jobs: Callable[[], Iterable[Mapping[str, Any]]] = lambda: (),
    ) -> None:
        self.executor = executor
        self._new_executor = new_executor
        self._jobs = jobs
        self._memo: dict[str, tuple[object, dict[str, Any]]] = {}
        self.scheduler = scheduler
        self.forecasts = forecasts
        self.history = history if history is not None else RuntimeHistory()
        self._profiles = profiles
        self._settings = settings
        self.interval_s = interval_s
        self.poll_s = poll_s
        self.horizon_s = horizon_s
        if not 0 < cpu_share <= 1:
            raise ValueError(f"cpu_share: {cpu_share!r} is not a share of one core (0 < s ≤ 1)")
        self.cpu_share = cpu_share
        self._restate = restate
        self._wall = wall
        self._seen: dict[str, float] = {}  # bound pod uid → when first seen bound
        self._learns: set[str] = set()  # … seen bound from the start: their run time teaches
        self._dirty = True
        self._queue_seen: int | None = None
        self._last: float | None = None
        self._put_off_since: float | None = None  # a due forecast waits for pods being placed
        self._waiting_since: dict[str, float] = {}  # uid → when a poll first saw it waiting
        self._running = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.learned = 0  # pod ends the history learnt from

    # --- the runtime history, from real ends ---------------------------------------------------

    def start(self, ready: asyncio.Event | None = None) -> None:
        """Forecast from when ``ready`` is set (the scheduler started: the inventory synced)."""
        self._task = asyncio.create_task(self._main(ready), name="forecaster")

    def _follow(self) -> None:
        """Pods bound now started before we watched: their run time would teach nothing."""
        inventory = self.scheduler.inventory
        now = self._wall()
        for name in inventory.names():
            for pod in inventory.bound_pods(name):
                self._seen.setdefault(pod.uid, now)
        self._unsubscribe = inventory.subscribe(self._on_inventory)

    async def _main(self, ready: asyncio.Event | None) -> None:
        if ready is not None:
            await ready.wait()
        self._follow()
        await self._loop()

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _on_inventory(self, event: InventoryEvent) -> None:
        """One pod at a time (the one that came, or left): never a walk over a node's pods."""
        self._dirty = True
        came, left = event.came, event.left
        if came is not None and came.uid not in self._seen:
            self._seen[came.uid] = self._wall()
            self._learns.add(came.uid)
        if left is None:
            return
        inventory = self.scheduler.inventory
        uid = left.uid
        if inventory.bound_pod(uid) is not None:
            return  # moved to another node
        seen = self._seen.pop(uid, None)
        # Only a natural end teaches a run time: a pod preempted, evicted or deleted stopped
        # early (its node's removal says nothing either).
        if (
            uid in self._learns
            and seen is not None
            and event.kind != "removed"
            and inventory.ran_to_end(uid)
        ):
            now = self._wall()
            self.history.observe(pod_object(left, started=seen), now - seen)
            self.learned += 1
        self._learns.discard(uid)

    # --- the copy ------------------------------------------------------------------------------

    def copy(self, extra: Sequence[Mapping[str, Any]] = ()) -> ClusterCopy:
        """The live cluster now (the event loop's: call it there), with ``extra`` pods pending
        after the queue's."""
        now = self._wall()
        by_uid: dict[str, Mapping[str, Any]] | None = None

        def job_of(pod: BoundPod) -> Mapping[str, Any] | None:
            nonlocal by_uid
            if pod.owner_kind != "Job" or not pod.owner_uid:
                return None
            if by_uid is None:  # once a copy, and only when a Job's pod runs
                by_uid = {str((j.get("metadata") or {}).get("uid") or ""): j for j in self._jobs()}
            return by_uid.get(pod.owner_uid)

        def left(pod: BoundPod, obj: Mapping[str, Any]) -> Runtime:
            return expected_runtime(obj, now=now, job=job_of(pod), history=self.history)

        return copy_of(
            self.scheduler,
            started=lambda pod: self._seen.get(pod.uid, now),
            left=left,
            duration=lambda obj: expected_duration(obj, history=self.history),
            extra=extra,
            memo=self._memo,
        )

    # --- running forward -----------------------------------------------------------------------

    async def _forward(
        self, state: ClusterCopy, pods: Sequence[str] | None
    ) -> dict[str, Prediction]:
        loop = asyncio.get_running_loop()
        args = (state, pods, self.horizon_s, self._profiles, self._settings)
        try:
            return await loop.run_in_executor(self.executor, forward, *args)
        except concurrent.futures.BrokenExecutor as e:
            if self._new_executor is None:
                raise
            log.warning("the forecast's worker process ended (%s); starting another", e)
            broken, self.executor = self.executor, self._new_executor()
            if broken is not None:
                broken.shutdown(wait=False, cancel_futures=True)
            return await loop.run_in_executor(self.executor, forward, *args)

    def _forecast(self, p: Prediction, uid: str, now: float) -> Forecast:
        return Forecast(
            pod=p.pod,
            uid=uid,
            made_at=now,
            starts_at=None if p.starts_in_s is None else now + p.starts_in_s,
            horizon_s=self.horizon_s,
            node=p.node,
            after=p.after,
            sources=dict(p.sources),
            unknown_ends=p.unknown_ends,
            unknown=p.unknown,
        )

    async def refresh(self) -> None:
        """Forecast every pending pod now (one run at a time)."""
        async with self._running:
            self._dirty = False
            self._put_off_since = None
            now = self._wall()
            self._last = now
            state = self.copy()
            uids = {_key(o): str((o.get("metadata") or {}).get("uid") or "") for o in state.pending}
            found = await self._forward(state, None) if uids else {}
            self.forecasts.last_run_s = max(0.0, self._wall() - now)
            published = {k: self._forecast(p, uids.get(k, ""), now) for k, p in found.items()}
            for key, forecast in published.items():  # at most one new forecast a minute per pod
                kept = self.forecasts.get(key)
                if (
                    kept is not None
                    and kept.uid == forecast.uid
                    and now - kept.made_at < self.interval_s
                ):
                    published[key] = kept
            changed = self.forecasts.publish(published, now)
        if changed and self._restate is not None:
            self._restate(changed)

    async def predict_with(self, pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Forecast]:
        """The what-if's port: ``pods`` added to the pending queue (after the pods already
        waiting of their priority), the engine run forward; their forecasts."""
        now = self._wall()
        extra = []
        for obj in pods:
            copy = {**obj, "metadata": dict(obj.get("metadata") or {})}
            meta = copy["metadata"]
            meta.setdefault("namespace", "default")
            meta.setdefault("uid", f"whatif-{uuid.uuid4()}")
            meta.setdefault("creationTimestamp", _stamp(now))
            extra.append(copy)
        keys = [_key(o) for o in extra]
        async with self._running:
            state = self.copy(extra)
            found = await self._forward(state, keys)
        return {k: self._forecast(p, "", now) for k, p in found.items()}

    def _due(self, now: float) -> bool:
        waiting, placing = self._queue_now()
        seen = {uid: self._waiting_since.get(uid, now) for uid in waiting.values()}
        self._waiting_since = seen  # pods no longer waiting (bound, gone) are forgotten
        if not waiting:
            self._put_off_since = None
            return False  # no explanation to complete: a pod gets a forecast once it waits
        if self._last is not None and now - self._last < self.forecasts.last_run_s / self.cpu_share:
            return False  # the worker rests: its runs take cpu_share of a core at most
        if not self._wanted(now, {key: seen[uid] for key, uid in waiting.items()}):
            return False
        if placing:
            # Pods not tried yet (or being placed for the first time): a stream is being
            # scheduled. The copy would be stale within the second and the forward run would
            # place them all again, every poll: wait for them, a minute at most.
            if self._put_off_since is None:
                self._put_off_since = now
            if now - self._put_off_since < self.interval_s:
                return False
        self._put_off_since = None
        return True

    def _wanted(self, now: float, waiting: Mapping[str, float]) -> bool:
        """``waiting``: the waiting pods' keys, each with when a poll first saw it waiting."""
        fresh = [key for key in waiting if self.forecasts.get(key) is None]
        if any(now - waiting[key] >= self.poll_s for key in fresh):
            return True  # waited a poll with no forecast yet (the others keep theirs a minute)
        if len(fresh) == len(waiting):
            return False  # none has waited a poll yet: most are bound within seconds
        if self._last is not None and now - self._last < self.interval_s:
            return False
        size = sum(1 for _ in self.scheduler.queue.entries())
        if size != self._queue_seen:
            self._queue_seen = size
            self._dirty = True
        if self._dirty:
            return True
        for key in waiting:  # a start that passed: some runtime ran over
            forecast = self.forecasts.get(key)
            if forecast is not None and forecast.starts_at is not None and forecast.starts_at < now:
                return True
        return False

    def _queue_now(self) -> tuple[dict[str, str], bool]:
        """The pods an attempt could not place (their explanation waits for a forecast), by key
        with their UIDs, and whether any pod is still to be tried for the first time. A pod not
        tried yet is not one of the first (most are bound within the second: a stream of them
        would copy the cluster and run it forward, all of the queue, for nothing); it gets a
        forecast if it fails. With none waiting the forecaster does not run at all."""
        waiting: dict[str, str] = {}
        placing = False
        for e in self.scheduler.queue.entries():
            if e.where == "bound" or e.needs_update:
                continue
            if e.last_message and e.attempts:
                waiting[e.key] = e.uid
            elif e.where in ("active", "in_flight") or e.last_message:
                # ... or held back before its first attempt (kube's PreEnqueue: a claim made
                # from its template is not there yet, usually for some milliseconds): still to
                # be tried, with nothing a forecast could say.
                placing = True
        return waiting, placing

    async def poll(self) -> bool:
        """What the forecaster does every ``poll_s``: a refresh, if one is due (see "When" above);
        whether it made one."""
        if not self._due(self._wall()):
            return False
        await self.refresh()
        return True

    async def _loop(self) -> None:
        while True:
            try:
                await self.poll()
            except Exception:  # a failed forecast must not end forecasting
                log.exception("forecasting pending pods failed")
            await asyncio.sleep(self.poll_s)
