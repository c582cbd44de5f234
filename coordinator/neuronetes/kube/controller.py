"""The NeuroNetes controller: AgentPools, ToolBindings and the pools' pods watched, and every
changed pool reconciled (:mod:`.reconcile`), one pool's failure never another's.

A change to a pool, one of its pods or a ToolBinding naming it marks the pool dirty; every
``resyncSeconds`` all pools are marked and their load signals read. Only while ``active()`` (this
coordinator leads) does anything get written. Where the API server does not serve
``agentpools.neuronetes.io`` the controller says so once and idles, listing again now and then, so
installing the CRD later is enough.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from common import podkeys
from common.kube import PODS, KubeClient, KubeError, KubeObject
from coordinator.adapters.kube.agentpools import AGENT_POOLS, TOOL_BINDINGS
from coordinator.adapters.kube.objects import Key, ObjectCache
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.neuronetes.decide.conditions import Condition
from coordinator.neuronetes.decide.hooks import NodeFacts, Policy
from coordinator.neuronetes.decide.podtemplate import POOL_LABEL, pool_label
from coordinator.neuronetes.decide.scaling import ScaleMemory
from coordinator.neuronetes.decide.settings import NeuronetesSettings
from coordinator.neuronetes.kube.reconcile import PoolState, Reconciler, newer
from coordinator.neuronetes.kube.writes import PoolWrites

log = logging.getLogger(__name__)

__all__ = ["NeuronetesController"]

_ORPHANS: Key = ("", "")  # the dirty-set entry that re-checks bindings without a pool
#: A pool whose reconcile fails is retried after 1 s, then 2, 4, … up to 5 minutes; at once when
#: its spec changes (a new generation).
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 300.0


@dataclass(slots=True)
class Failure:
    """A pool's failing reconciles: how many in a row, of which generation, when to try again."""

    attempts: int
    generation: int
    retry_at: float
    delay_s: float


class _PoolPods:
    """The pods labelled ``neuronetes.io/pool``, by pool. A pod's key is its namespace and that
    label's value (:func:`~coordinator.neuronetes.decide.podtemplate.pool_label` of the pool's
    name); ``changed`` is told that key."""

    def __init__(self, changed: Callable[[Key], None]) -> None:
        self._changed = changed
        self.by_uid: dict[str, KubeObject] = {}

    @staticmethod
    def pool_of(pod: KubeObject) -> Key:
        meta = pod.get("metadata") or {}
        return (
            str(meta.get("namespace") or "default"),
            str((meta.get("labels") or {})[POOL_LABEL]),
        )

    def of(self, key: Key) -> list[KubeObject]:
        """The pods of the pool ``key`` (namespace, pool name)."""
        want = (key[0], pool_label(key[1]))
        return [p for p in self.by_uid.values() if self.pool_of(p) == want]

    def put(self, pod: KubeObject) -> None:
        self.by_uid[str(pod["metadata"]["uid"])] = pod

    def replace(self, items: list[KubeObject]) -> None:
        self.by_uid = {str(p["metadata"]["uid"]): p for p in items}
        for key in {self.pool_of(p) for p in items}:
            self._changed(key)

    def apply(self, kind: Change, obj: KubeObject) -> None:
        uid = str(obj["metadata"]["uid"])
        if kind == "DELETED":
            self.by_uid.pop(uid, None)
        else:
            self.by_uid[uid] = obj
        self._changed(self.pool_of(obj))


class NeuronetesController:
    """Event-loop only. ``node_labels()``: the labels of every node (GPU types are checked
    against them); ``node_facts()``: every node by name with its labels, GPUs and cached models
    (when given, the labels come from it); ``policies``: the per-pool policy step (default:
    :data:`~coordinator.neuronetes.decide.policy.GUIDE_POLICIES`), with ``policy_inputs``
    (price table, carbon readings… from the configuration) as their inputs; no pool is
    reconciled before every event of ``ready`` is set."""

    def __init__(
        self,
        client: KubeClient,
        settings: NeuronetesSettings | None = None,
        *,
        namespace: str | None = None,
        node_labels: Callable[[], Iterable[Mapping[str, str]]] = lambda: (),
        node_facts: Callable[[], Mapping[str, NodeFacts]] | None = None,
        active: Callable[[], bool] = lambda: True,
        instance: str = "topos",
        policies: Sequence[Policy] | None = None,
        policy_inputs: Mapping[str, Any] | None = None,
        ready: Sequence[asyncio.Event] = (),
        scheduler_name: str = podkeys.AGENT_POOL_SCHEDULER_NAME,
        writes: PoolWrites,
    ) -> None:
        """``scheduler_name``: the profile the pools' pods name. ``client`` reads (the watches);
        every write goes through ``writes`` (``adapters.kube.agentpools.AgentPoolWriter``)."""
        self._writes = writes
        self._scheduler_name = scheduler_name
        self._policy_inputs = policy_inputs
        self._ready = list(ready)
        self.settings = settings or NeuronetesSettings()
        self._client = client
        self._node_labels = node_labels
        self._node_facts = node_facts
        self._active = active
        self._instance = instance
        self._policies = policies
        self._dirty: set[Key] = set()
        self._scrape: set[Key] = set()
        self._wake = asyncio.Event()
        self.states: dict[Key, PoolState] = {}
        #: Pools whose last reconcile failed (retried with backoff).
        self.failures: dict[Key, Failure] = {}
        self._timer: asyncio.TimerHandle | None = None
        self.pools = ObjectCache(client, AGENT_POOLS, namespace=namespace, on_change=self._pool)
        self.bindings = ObjectCache(
            client, TOOL_BINDINGS, namespace=namespace, on_change=self._binding
        )
        self.pods = _PoolPods(self._pods_changed)
        self._pod_reflector = Reflector(
            client,
            PODS,
            self.pods,
            namespace=namespace,
            label_selector=POOL_LABEL,
            what="pool pods",
        )
        self.pools.reflector.what = "AgentPools (agentpools.neuronetes.io)"
        self._gone: set[Key] = set()
        #: Times the loop found pools to reconcile and held them back until ``ready`` (what a
        #: caller can wait on to know a pool was seen and not judged).
        self.held_back = 0

    @property
    def synced(self) -> list[asyncio.Event]:
        return [self.pools.synced, self.bindings.synced, self._pod_reflector.synced]

    def _mark(self, key: Key, *, scrape: bool = False) -> None:
        self._dirty.add(key)
        if scrape:
            self._scrape.add(key)
        self._wake.set()

    def _pods_changed(self, labelled: Key) -> None:
        """Pods labelled ``neuronetes.io/pool=<value>`` changed: mark the pool(s) it names."""
        ns, value = labelled
        if (ns, value) in self.pools.objects and pool_label(value) == value:
            self._mark(labelled)
            return
        found = [k for k in self.pools.objects if k[0] == ns and pool_label(k[1]) == value]
        for key in found or [labelled]:
            self._mark(key)

    def _pool(self, key: Key, obj: KubeObject | None) -> None:
        if obj is None:
            self._gone.add(key)
            self._mark(_ORPHANS)
        self._mark(key, scrape=obj is not None and key not in self.states)

    def _binding(self, key: Key, obj: KubeObject | None) -> None:
        pool = _pool_ref(obj or {})
        if pool:
            self._mark((key[0], pool))
        self._mark(_ORPHANS)  # a binding naming no pool, or one that is gone: its status says so

    def _bindings_of(self, key: Key) -> list[KubeObject]:
        return [
            b
            for (ns, _), b in self.bindings.objects.items()
            if ns == key[0]
            and ((b.get("spec") or {}).get("agentPoolRef") or {}).get("name") == key[1]
        ]

    async def run(self) -> None:
        async with aiohttp.ClientSession() as session:
            reconciler = Reconciler(
                self._writes,
                self.settings,
                session=session,
                instance=self._instance,
                policies=self._policies,
                policy_inputs=self._policy_inputs,
                scheduler_name=self._scheduler_name,
            )
            tasks = [
                asyncio.create_task(self.pools.run(), name="neuronetes-pools"),
                asyncio.create_task(self.bindings.run(), name="neuronetes-bindings"),
                asyncio.create_task(self._pod_reflector.run(), name="neuronetes-pods"),
                asyncio.create_task(self._tick(), name="neuronetes-resync"),
            ]
            try:
                await self._loop(reconciler)
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.settings.resync_s)
            for key in self.pools.objects:
                self._mark(key, scrape=True)
            self._wake.set()

    async def _loop(self, reconciler: Reconciler) -> None:
        for event in self.synced:
            await event.wait()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._active():
                await asyncio.sleep(0.2)
                self._wake.set()
                continue
            waiting = [event for event in self._ready if not event.is_set()]
            if waiting:
                # ``ready``: the node inventory's first sync — a policy judging nodes (cached
                # replicas, spot capacity, regions) must not report on an empty inventory. The
                # marked pools stay marked until it is done.
                self.held_back += 1
                for event in waiting:
                    await event.wait()
                self._wake.set()
                continue
            dirty, self._dirty = self._due(self._dirty)
            scrape = {k for k in self._scrape if k in dirty}
            self._scrape -= scrape
            await asyncio.gather(*(self._one(reconciler, key, key in scrape) for key in dirty))
            await self._orphan_bindings(reconciler, _ORPHANS in dirty)

    def _due(self, marked: set[Key]) -> tuple[set[Key], set[Key]]:
        """The marked pools to reconcile now, and those waiting out a failure's backoff (kept
        marked, with a wake-up when the first is due). A new generation is due at once."""
        now = time.monotonic()
        due: set[Key] = set()
        later: set[Key] = set()
        for key in marked:
            failed = self.failures.get(key)
            obj = self.pools.objects.get(key)
            if (
                failed is not None
                and failed.retry_at > now
                and obj is not None
                and _generation(obj) == failed.generation
            ):
                later.add(key)
            else:
                due.add(key)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if later:
            first = min(self.failures[k].retry_at for k in later)
            self._timer = asyncio.get_running_loop().call_later(first - now, self._wake.set)
        return due, later

    async def _one(self, reconciler: Reconciler, key: Key, scrape: bool) -> None:
        try:
            cached = self.pools.objects.get(key)
            state = self.states.get(key)
            obj = newer(cached, state.latest if state is not None else None)
            if obj is None:
                if key in self._gone:
                    self._gone.discard(key)
                    self.states.pop(key, None)
                    await reconciler.forget(*key)
                return
            if state is None:
                # A pool first seen (a new pool, or a new leader) waits a cooldown before shrinking.
                state = self.states[key] = PoolState(
                    memory=ScaleMemory(last_scale=time.monotonic())
                )
            facts = dict(self._node_facts()) if self._node_facts is not None else {}
            if self._node_facts is not None:
                labels = [dict(f.labels) for f in facts.values()]
            else:
                labels = [dict(n) for n in self._node_labels()]
            types = {n["neuronetes.io/gpu-type"] for n in labels if "neuronetes.io/gpu-type" in n}
            created = await reconciler.reconcile(
                obj,
                self.pods.of(key),
                self._bindings_of(key),
                state,
                node_types=types,
                nodes=labels,
                scrape=scrape,
                node_facts=facts,
            )
            for pod in created:
                # The watch may already hold a newer copy (bound, running): keep that one.
                if str(pod["metadata"]["uid"]) not in self.pods.by_uid:
                    self.pods.put(pod)
            self.failures.pop(key, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._failed(reconciler, key, exc)

    async def _failed(self, reconciler: Reconciler, key: Key, exc: Exception) -> None:
        """A failed reconcile: condition ``Reconciled=False`` (reason ``ReconcileFailed``, the
        step and the error) on the pool, one log line, and a retry after an exponential
        backoff (:data:`BACKOFF_FIRST_S` doubling to :data:`BACKOFF_MAX_S`)."""
        obj = self.pools.objects.get(key)
        state = self.states.get(key)
        generation = _generation(obj) if obj is not None else 0
        before = self.failures.get(key)
        attempts = 1 if before is None or before.generation != generation else before.attempts + 1
        delay = min(BACKOFF_FIRST_S * 2 ** (attempts - 1), BACKOFF_MAX_S)
        self.failures[key] = Failure(attempts, generation, time.monotonic() + delay, delay)
        step = state.step if state is not None else "reconciling"
        what = f"{step}: {exc}" if str(exc) else f"{step}: {type(exc).__name__}"
        # A bug (not the API server's refusal) shows its traceback, once per failing streak.
        trace = attempts == 1 and not isinstance(exc, KubeError)
        log.warning(
            "AgentPool %s/%s: reconcile failed (attempt %d; next in %gs): %s",
            *key,
            attempts,
            delay,
            what,
            exc_info=trace,
        )
        if obj is not None and state is not None:
            message = f"{what} (attempt {attempts}; retrying in {delay:g}s)"
            try:
                await reconciler.failed(newer(obj, state.latest) or obj, state, message)
            except Exception as write_exc:
                log.warning("AgentPool %s/%s: cannot write status: %s", *key, write_exc)
        self._mark(key)

    async def _orphan_bindings(self, reconciler: Reconciler, due: bool) -> None:
        if not due:
            return
        for (ns, name), binding in list(self.bindings.objects.items()):
            ref = _pool_ref(binding)
            if ref and (ns, str(ref)) in self.pools.objects:
                continue
            why = (
                f"spec.agentPoolRef names AgentPool {ref!r}, which does not exist"
                if ref
                else "spec.agentPoolRef names no AgentPool: the queue's lag scales nothing"
            )
            cond = Condition("PoolBound", "False", "NoAgentPool", why)
            try:
                await reconciler.binding_status(binding, {}, [cond])
            except Exception as exc:
                log.warning("ToolBinding %s/%s: cannot write status: %s", ns, name, exc)


def _generation(obj: KubeObject) -> int:
    return int((obj.get("metadata") or {}).get("generation") or 0)


def _pool_ref(binding: KubeObject) -> str | None:
    ref = ((binding.get("spec") or {}).get("agentPoolRef") or {}).get("name")
    return str(ref) if ref else None
