"""One AgentPool's reconcile: read and check the spec, read its load signals (on the resync
tick), decide the replicas, run the policies, make its PriorityClass and pods, write its status
and Events. Every step is the pure code's (:mod:`coordinator.neuronetes.decide`); this module
reads the signals and asks for each write through the :class:`.writes.PoolWrites` port (the
Kubernetes writes are ``coordinator.adapters.kube.agentpools``'). A pool whose spec is
invalid gets ``Ready=False`` / ``Invalid`` and keeps its pods."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from common import podkeys
from common.kube.types import KubeObject
from coordinator.neuronetes.decide.conditions import Condition, merge_conditions, transitions
from coordinator.neuronetes.decide.hooks import NodeFacts, Policy, PolicyContext, run_policies
from coordinator.neuronetes.decide.podtemplate import (
    POOL_LABEL,
    pod_for,
    pool_label,
    pool_template,
    priority_class_for,
    priority_class_name,
    template_hash,
)
from coordinator.neuronetes.decide.policy import GUIDE_POLICIES
from coordinator.neuronetes.decide.policy.spot import on_demand
from coordinator.neuronetes.decide.pool import PoolProblem, PoolSpec, parse_pool
from coordinator.neuronetes.decide.replicas import OwnedPod, owned_pod, plan_replicas
from coordinator.neuronetes.decide.scaling import (
    Decision,
    LagSignal,
    ScaleMemory,
    TokenSignals,
    decide,
    format_seconds,
    lag_of,
)
from coordinator.neuronetes.decide.settings import NeuronetesSettings
from coordinator.neuronetes.decide.signals import RateTracker, SignalError
from coordinator.neuronetes.kube.scrape import binding_lag, pool_tokens
from coordinator.neuronetes.kube.writes import PoolWrites

log = logging.getLogger(__name__)

__all__ = ["PoolState", "Reconciler", "newer"]


def _stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class PoolState:
    """What the controller keeps of one pool between reconciles."""

    memory: ScaleMemory
    rates: RateTracker = field(default_factory=RateTracker)
    tokens: TokenSignals | None = None
    lags: list[LagSignal] = field(default_factory=list)
    decision: Decision | None = None
    signal_problem: str | None = None
    last_scale_time: str | None = None
    last_scale_reason: str | None = None
    latest: KubeObject | None = None
    """The pool as our last write returned it (the watch may not have brought it yet)."""
    policy_memory: dict[str, Any] = field(default_factory=dict)
    """What the pool's policies keep between reconciles (interruptions, the model chosen)."""
    step: str = "reconciling"
    """What the reconcile was doing last (named in the condition when it fails)."""


class Reconciler:
    def __init__(
        self,
        writes: PoolWrites,
        settings: NeuronetesSettings,
        *,
        session: aiohttp.ClientSession,
        instance: str = "topos",
        policies: Sequence[Policy] | None = None,
        policy_inputs: Mapping[str, Any] | None = None,
        scheduler_name: str = podkeys.AGENT_POOL_SCHEDULER_NAME,
    ) -> None:
        """``scheduler_name``: the profile the pools' pods name (the scheduler's AgentPool
        profile)."""
        self._scheduler_name = scheduler_name
        self._writes = writes
        self._policy_inputs = dict(policy_inputs or {})
        self._settings = settings
        self._session = session
        self._instance = instance
        self._policies = GUIDE_POLICIES if policies is None else policies
        self._priority_classes: dict[str, tuple[int, str]] = {}

    async def event(self, obj: KubeObject, reason: str, message: str, warning: bool) -> None:
        try:
            await self._writes.event(obj, reason, message, warning=warning, instance=self._instance)
        except Exception as exc:  # an Event lost is no reason to stop serving the pool
            log.warning("cannot post Event %s: %s", reason, exc)

    async def forget(self, namespace: str, name: str) -> None:
        """The pool is gone: its pods go with it (garbage collector); its PriorityClass here."""
        pc = priority_class_name(namespace, name)
        self._priority_classes.pop(pc, None)
        await self._writes.delete_priority_class(pc)

    async def _priority_class(self, pool: PoolSpec) -> None:
        body = priority_class_for(pool)
        want = (int(body["value"]), str(body["preemptionPolicy"]))
        name = priority_class_name(pool.namespace, pool.name)
        if self._priority_classes.get(name) == want:
            return
        await self._writes.priority_class(body)
        self._priority_classes[name] = want

    async def _signals(
        self,
        pool: PoolSpec,
        pods: Sequence[OwnedPod],
        bindings: Sequence[KubeObject],
        st: PoolState,
    ) -> None:
        problems: list[str] = []
        if pool.autoscaling is not None:
            try:
                st.tokens = await pool_tokens(
                    self._session,
                    pool,
                    pods,
                    st.rates,
                    prometheus_url=self._settings.prometheus_url,
                )
            except SignalError as exc:
                st.tokens = None
                problems.append(str(exc))
        st.lags = []
        for binding in bindings:
            try:
                lag = await binding_lag(
                    self._session, binding, prometheus_url=self._settings.prometheus_url
                )
            except SignalError as exc:
                problems.append(f"ToolBinding {binding['metadata']['name']}: {exc}")
                await self._binding_status(binding, None, pool, str(exc))
                continue
            if lag is not None:
                st.lags.append(lag)
                await self._binding_status(binding, lag, pool, None)
        st.signal_problem = "; ".join(problems) or None

    async def _binding_status(
        self, binding: KubeObject, lag: LagSignal | None, pool: PoolSpec, problem: str | None
    ) -> None:
        current = pool.base_replicas()
        if problem is not None:
            cond = Condition("SignalsAvailable", "False", "QueueUnreadable", problem)
            fields: dict[str, Any] = {}
        else:
            assert lag is not None
            cond = Condition("SignalsAvailable", "True", "QueueRead", f"AgentPool {pool.name}")
            fields = {"queueDepth": lag.queue_depth, "lag": lag_of(lag, current)}
        await self.binding_status(binding, fields, [cond])

    async def binding_status(
        self, binding: KubeObject, fields: Mapping[str, Any], conds: Sequence[Condition]
    ) -> None:
        old = (binding.get("status") or {}).get("conditions") or []
        status = {**fields, "conditions": merge_conditions(old, conds, _stamp())}
        if _same(binding.get("status") or {}, status):
            return
        if await self._writes.status(binding, status, binding=True) is None:
            return  # gone
        for cond in transitions(old, conds):
            if cond.status == "False":
                await self.event(binding, cond.reason, cond.message, True)

    async def reconcile(
        self,
        obj: KubeObject,
        pods: Sequence[KubeObject],
        bindings: Sequence[KubeObject],
        state: PoolState,
        *,
        node_types: set[str],
        nodes: Sequence[Mapping[str, str]],
        scrape: bool,
        node_facts: Mapping[str, NodeFacts] | None = None,
    ) -> list[KubeObject]:
        """Reconcile one pool; returns the pods it created (for the caller's cache)."""
        state.step = "reading the spec"
        try:
            pool = parse_pool(obj, node_types)
        except PoolProblem as exc:
            cond = Condition("Ready", "False", "Invalid", str(exc))
            await self._write_status(obj, {"observedGeneration": _generation(obj)}, [cond], state)
            return []
        mine = [owned_pod(p) for p in pods if _owned_by(p, pool.uid)]
        if scrape and (pool.autoscaling is not None or bindings):
            state.step = "reading the load signals"
            await self._signals(pool, mine, bindings, state)
            current = pool.base_replicas()
            state.decision = decide(
                current,
                low=pool.min_replicas,
                high=pool.max_replicas,
                tokens=state.tokens,
                lags=state.lags,
                slo_s=pool.autoscaling.ttft_s if pool.autoscaling else None,
                load_s=pool.autoscaling.model_load_s if pool.autoscaling else 0.0,
                cooldown_s=pool.autoscaling.cooldown_s if pool.autoscaling else 60.0,
                memory=state.memory,
                now=time.monotonic(),
                tokens_expected=pool.autoscaling is not None,
            )
            if state.decision.desired != current:
                pool = await self._scale(obj, pool, state.decision, state)
        template = pool_template(
            pool, self._settings.default_image, scheduler_name=self._scheduler_name
        )
        ctx = run_policies(
            PolicyContext(
                pool=pool,
                raw=obj,
                template=template,
                now=time.time(),
                nodes=nodes,
                decision=state.decision,
                inputs=self._policy_inputs,
                node_facts=node_facts or {},
                pods=mine,
                memory=state.policy_memory,
            ),
            self._policies,
        )
        if ctx.scale_to is not None and ctx.scale_to > pool.base_replicas():
            wanted = min(ctx.scale_to, pool.max_replicas)
            cost = ctx.status.get("cost") or {}
            pool = await self._scale(
                obj, pool, Decision(wanted, str(cost.get("reason") or "policy")), state
            )
            state.memory.last_scale = time.monotonic()
        if ctx.evict:
            state.step = "deleting the pods on vanished nodes"
            for pod in mine:
                if pod.name in ctx.evict:
                    await self._writes.delete_pod(pool.namespace, pod.name, pod.uid)
            log.info(
                "AgentPool %s/%s: pods on vanished nodes deleted: %s",
                pool.namespace,
                pool.name,
                ", ".join(sorted(ctx.evict)),
            )
            mine = [p for p in mine if p.name not in ctx.evict]
        if pool.wants_priority_class:
            state.step = f"making PriorityClass {priority_class_name(pool.namespace, pool.name)}"
            await self._priority_class(pool)
        created = await self._pods(pool, mine, ctx, state)
        conds = [*ctx.conditions, _ready(pool, mine, created)]
        olds = {c.get("type") for c in (obj.get("status") or {}).get("conditions") or ()}
        if "PolicyFailed" in olds and not any(c.type == "PolicyFailed" for c in conds):
            conds.append(Condition("PolicyFailed", "False", "PoliciesRan", "every policy ran"))
        if pool.unsupported:
            conds.append(
                Condition("SpecSupported", "False", "UnsupportedField", "; ".join(pool.unsupported))
            )
        elif "SpecSupported" in olds:
            conds.append(Condition("SpecSupported", "True", "AllFieldsUsed", "every field is used"))
        if "Reconciled" in olds:  # after a failure (reconciles that never failed do not say)
            conds.append(Condition("Reconciled", "True", "Reconciled", "the last reconcile ran"))
        if pool.autoscaling is not None or bindings:
            if state.signal_problem:
                conds.append(
                    Condition("SignalsAvailable", "False", "Unreadable", state.signal_problem)
                )
            elif state.tokens is not None or state.lags:
                conds.append(Condition("SignalsAvailable", "True", "Read", "load signals read"))
        state.step = "writing the status"
        await self._write_status(obj, self._status(pool, mine, created, state, ctx), conds, state)
        state.step = "reconciling"
        for ev in ctx.events:
            await self.event(obj, ev.reason, ev.message, ev.warning)
        return created

    async def failed(self, obj: KubeObject, state: PoolState, message: str) -> None:
        """The reconcile failed: ``Reconciled=False``, reason ``ReconcileFailed`` (a Warning
        Event when it turns false); the rest of the status stays as it was."""
        cond = Condition("Reconciled", "False", "ReconcileFailed", message)
        await self._write_status(obj, {}, [cond], state)

    async def _scale(
        self, obj: KubeObject, pool: PoolSpec, decision: Decision, state: PoolState
    ) -> PoolSpec:
        current = pool.base_replicas()
        state.step = f"scaling to {decision.desired} replicas"
        state.latest = await self._writes.scale(obj, decision.desired)
        way = "ScaledUp" if decision.desired > current else "ScaledDown"
        message = f"{current} → {decision.desired} replicas: {decision.reason}"
        log.info("AgentPool %s/%s %s", pool.namespace, pool.name, message)
        state.last_scale_time, state.last_scale_reason = _stamp(), decision.reason
        await self.event(obj, way, message, False)
        return _replace_replicas(pool, decision.desired)

    async def _pods(
        self, pool: PoolSpec, mine: Sequence[OwnedPod], ctx: PolicyContext, state: PoolState
    ) -> list[KubeObject]:
        gates = ctx.gates()
        plan = plan_replicas(pool.base_replicas(), mine, template_hash(ctx.template), gates)
        created: list[KubeObject] = []
        state.step = "deleting pods"
        for pod in plan.delete:
            await self._writes.delete_pod(pool.namespace, pod.name, pod.uid)
        state.step = "lifting scheduling gates"
        for pod, kept in plan.ungate:
            # Only the pod this plan judged (a pod of the same name made since is not ours).
            await self._writes.set_gates(pool.namespace, pod.name, pod.uid, kept)
        anywhere = plan.create if ctx.spot_slots is None else ctx.spot_slots
        state.step = "creating a pod"
        for i in range(plan.create):
            body = pod_for(pool, ctx.template, time.time())
            if i >= anywhere:  # beyond the pods that may go to spot: on-demand only
                body = {**body, "spec": on_demand(body)["spec"]}
            created.append(await self._writes.create_pod(pool.namespace, body))
        if plan.delete or plan.create:
            log.info(
                "AgentPool %s/%s: %d pod(s) created, %d deleted",
                pool.namespace,
                pool.name,
                plan.create,
                len(plan.delete),
            )
        return created

    def _status(
        self,
        pool: PoolSpec,
        mine: Sequence[OwnedPod],
        created: Sequence[KubeObject],
        st: PoolState,
        ctx: PolicyContext,
    ) -> dict[str, Any]:
        live = [p for p in mine if p.live]
        status: dict[str, Any] = {
            "observedGeneration": 0,
            "replicas": len(live) + len(created),
            "scheduledReplicas": sum(1 for p in live if p.node),
            "readyReplicas": sum(1 for p in live if p.ready),
            "desiredReplicas": pool.base_replicas(),
            "selector": f"{POOL_LABEL}={pool_label(pool.name)}",
        }
        if pool.wants_priority_class:
            status["priorityClassName"] = priority_class_name(pool.namespace, pool.name)
        decision = st.decision
        if decision is not None and decision.expected_ttft_s is not None:
            ttft = decision.expected_ttft_s
            status["expectedTTFT"] = format_seconds(ttft)
            status["expectedTTFTSeconds"] = ttft if ttft != float("inf") else None
        if st.tokens is not None:
            status["tokensInQueue"] = round(st.tokens.tokens_in_queue, 3)
            status["tokensPerSecond"] = round(st.tokens.tokens_per_second, 3)
        if st.lags:
            status["queueLag"] = max(lag_of(s, pool.base_replicas()) for s in st.lags)
        if st.last_scale_time:
            status["lastScaleTime"] = st.last_scale_time
            status["lastScaleReason"] = st.last_scale_reason
        if ctx.status:
            status["policy"] = ctx.status
        return status

    async def _write_status(
        self,
        obj: KubeObject,
        fields: dict[str, Any],
        conds: Sequence[Condition],
        state: PoolState,
    ) -> None:
        old_status = obj.get("status") or {}
        old = old_status.get("conditions") or []
        fields["observedGeneration"] = _generation(obj)
        status = {**old_status, **fields, "conditions": merge_conditions(old, conds, _stamp())}
        if not _same(old_status, status):
            written = await self._writes.status(obj, status)
            if written is None:
                return  # gone
            state.latest = written
        for cond in transitions(old, conds):
            if cond.type == "Ready" and cond.reason != "Invalid" and cond.status == "False":
                continue  # not ready while pods start: no Event, the status says it
            warning = cond.status == "False" or cond.type == "PolicyFailed"
            await self.event(obj, cond.reason if warning else cond.type, cond.message, warning)


def _ready(pool: PoolSpec, mine: Sequence[OwnedPod], created: Sequence[KubeObject]) -> Condition:
    want = pool.base_replicas()
    ready = sum(1 for p in mine if p.live and p.ready)
    if ready >= want:
        return Condition("Ready", "True", "ReplicasReady", f"{ready} of {want} replicas ready")
    message = f"{ready} of {want} replicas ready"
    waiting = [p for p in mine if p.live and not p.node and p.unscheduled]
    if waiting:
        # what kubectl describe pod would say, on the pool: why its pods are not placed
        message += f"; {len(waiting)} not scheduled: {waiting[0].name}: {waiting[0].unscheduled}"
    return Condition("Ready", "False", "ReplicasNotReady", message)


def newer(cached: KubeObject | None, written: KubeObject | None) -> KubeObject | None:
    """The newer of the watch's copy of a pool and the one our last write returned (by
    resourceVersion, which etcd makes increasing); None when the watch saw it deleted."""
    if cached is None or written is None:
        return cached
    try:
        mine = int(written["metadata"]["resourceVersion"])
        seen = int(cached["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return cached
    same = written["metadata"].get("uid") == cached["metadata"].get("uid")
    return written if same and mine > seen else cached


def _generation(obj: KubeObject) -> int:
    return int((obj.get("metadata") or {}).get("generation") or 0)


def _same(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return all(old.get(k) == v for k, v in new.items())


def _owned_by(pod: KubeObject, uid: str) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or ()
    return any(r.get("controller") and r.get("uid") == uid for r in refs)


def _replace_replicas(pool: PoolSpec, replicas: int) -> PoolSpec:
    return dataclasses.replace(pool, replicas=replicas)
