"""The guide's ``costOptimization`` as two per-pool policies (:mod:`.hooks`): spot capacity
(interruptions, ``maxSpotPercent``, ``spotStrategy``) and the cost/SLO decision tree
(``maxCostPerHour``, ``sloHeadroomMs``, ``fallbackModel``). The pure rules are
:mod:`.policy.spot`, :mod:`.policy.budget` and :mod:`.policy.decision`; this module feeds them
what one reconcile knows and turns their answers into template edits, status and Events.

``ctx.inputs["prices"]`` is the configuration's ``scheduling.prices`` (a
:class:`~coordinator.core.framework.prices.PriceTable`, or a callable returning the one in force).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Final

from coordinator.core.framework.prices import SPOT, PriceTable, capacity_type
from coordinator.neuronetes.decide.conditions import Condition
from coordinator.neuronetes.decide.hooks import PolicyContext, PolicyEvent
from coordinator.neuronetes.decide.podtemplate import MODEL_ANNOTATION, require_everywhere
from coordinator.neuronetes.decide.policy.budget import NodeCost, PodCost, pool_cost
from coordinator.neuronetes.decide.policy.decision import Action, CostInputs, decide
from coordinator.neuronetes.decide.policy.errors import PolicyError
from coordinator.neuronetes.decide.policy.hosting import can_host
from coordinator.neuronetes.decide.policy.spot import (
    ON_DEMAND_AFFINITY,
    InterruptionTracker,
    SpotSettings,
    lost_spot_nodes,
    spot_replicas_allowed,
)

__all__ = ["RETURN_MARGIN", "cost_policy", "on_demand", "spot_policy"]

INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"
#: Back from the fallback model only once the pool's cost is this far under maxCostPerHour.
RETURN_MARGIN: Final = 0.8


def _cost_block(ctx: PolicyContext) -> Mapping[str, Any] | None:
    block = ctx.pool.scheduling.get("costOptimization")
    if not isinstance(block, Mapping) or block.get("enabled", True) is False:
        return None
    return block


def on_demand(template: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``template`` whose pods may not go to spot nodes (ANDed into every required
    node selector term)."""
    body = copy.deepcopy(dict(template))
    ours = ON_DEMAND_AFFINITY["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    require_everywhere(
        body.setdefault("spec", {}), ours["nodeSelectorTerms"][0]["matchExpressions"]
    )
    return body


def spot_policy(ctx: PolicyContext) -> None:
    """Interruptions: a spot node that held the pool's pods and is gone from the inventory
    counts once; pods left on any vanished node are deleted (and so replaced). At the limit spot
    is disabled for the pool: condition ``SpotEnabled=False`` (a Warning Event) and no new pod
    may go to spot. ``maxSpotPercent`` caps the pods placed on spot, counted at creation;
    ``spotStrategy.instanceTypes`` is preferred node affinity on the instance type."""
    block = _cost_block(ctx)
    mem = ctx.memory
    facts = ctx.node_facts
    live = [p for p in ctx.pods if p.live]
    before: dict[str, Mapping[str, str]] = mem.get("nodes", {})
    # A node the pool's pods ran on when last seen (their pods may be gone already).
    held: set[str] = mem.get("held", set())
    gone: set[str] = mem.setdefault("gone", set())
    if facts:  # an inventory not synced yet says nothing about nodes vanishing
        gone.update(n for n in before if n not in facts)
        gone.difference_update(facts)  # a node that came back is no longer gone
        mem["nodes"] = {name: f.labels for name, f in facts.items()}
    ctx.evict.update(p.name for p in live if p.node in gone)
    gone.intersection_update(p.node for p in ctx.pods)  # forgotten once no pod names it
    pool_nodes = held | {p.node for p in live if p.node is not None}
    lost = lost_spot_nodes(before, facts.keys(), pool_nodes) if facts else []
    mem["held"] = {p.node for p in live if p.node is not None and p.node in facts}
    if block is None:
        return
    settings = SpotSettings.from_pool(block)
    tracker: InterruptionTracker | None = mem.get("tracker")
    if tracker is None:
        tracker = mem["tracker"] = InterruptionTracker(settings)
    tracker.settings = settings  # a spec edit keeps the interruptions already counted
    for node in lost:
        tracker.record(node, at=ctx.now)
        ctx.events.append(
            PolicyEvent("SpotInterruption", f"spot node {node} running the pool's pods is gone")
        )
    verdict = tracker.verdict(ctx.now)
    types = (block.get("spotStrategy") or {}).get("instanceTypes")
    if types:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise PolicyError(
                "costOptimization.spotStrategy.instanceTypes: must be a list of names"
            )
        ctx.prefer_nodes({"key": INSTANCE_TYPE, "operator": "In", "values": list(types)}, 50)
    desired = ctx.pool.base_replicas()
    on_spot = sum(
        1
        for p in live
        if p.node is not None and p.node in facts and capacity_type(facts[p.node].labels) == SPOT
    )
    unbound = sum(1 for p in live if not p.node and p.name not in ctx.evict)
    allowed = spot_replicas_allowed(desired, settings.max_spot_percent) if settings.enabled else 0
    if verdict.disabled or (lost and settings.migrate_on_interruption):
        ctx.spot_slots = 0
    elif settings.enabled:
        ctx.spot_slots = max(0, allowed - on_spot - unbound)
    mem["spot"] = {"disabled": verdict.disabled, "onSpot": on_spot, "allowed": allowed}
    ctx.status["spot"] = {
        "enabled": settings.enabled and not verdict.disabled,
        "interruptions": verdict.count,
        "replicasOnSpot": on_spot,
        "spotReplicasAllowed": allowed,
        "reason": verdict.reason,
    }
    if settings.enabled and verdict.disabled:
        ctx.conditions.append(
            Condition("SpotEnabled", "False", "InterruptionLimit", verdict.reason)
        )
    elif settings.enabled:
        ctx.conditions.append(Condition("SpotEnabled", "True", "WithinLimit", verdict.reason))


def _pod_gpus(template: Mapping[str, Any]) -> int:
    containers = (template.get("spec") or {}).get("containers") or [{}]
    limits = (containers[0].get("resources") or {}).get("limits") or {}
    try:
        return int(limits.get("nvidia.com/gpu", 0))
    except (TypeError, ValueError):
        return 0


def _number(block: Mapping[str, Any], key: str) -> float | None:
    value = block.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PolicyError(f"costOptimization.{key}: must be a number ≥ 0, not {value!r}")
    return float(value)


def cost_policy(ctx: PolicyContext) -> None:
    """The decision tree each reconcile: ``status.policy.cost`` says the action and why, and an
    Event says so when the action changes. The cost is measured only once every replica is
    bound (a pool being replaced keeps its last model). ``fallbackModel`` replaces the template's
    model while the cost is above ``maxCostPerHour``; the pool returns to its own model once the
    cost is at most :data:`RETURN_MARGIN` of the limit (hysteresis: no flapping at the line).
    An SLO at risk (``expected TTFT + sloHeadroomMs > slo``) scales up, else sends new pods to
    on-demand nodes."""
    block = _cost_block(ctx)
    if block is None:
        return
    mem = ctx.memory
    given = ctx.inputs.get("prices") or PriceTable()
    prices: PriceTable = given() if callable(given) else given
    limit = _number(block, "maxCostPerHour")
    headroom = _number(block, "sloHeadroomMs") or 0.0
    fallback = block.get("fallbackModel")
    trigger = block.get("fallbackTrigger") or {}
    if fallback is not None and not isinstance(fallback, str):
        raise PolicyError(f"costOptimization.fallbackModel: must be a name, not {fallback!r}")
    primary = ctx.pool.model or ""
    model: str = mem.get("model") or primary
    live = [p for p in ctx.pods if p.live and p.name not in ctx.evict]
    bound = [p for p in live if p.node and p.node in ctx.node_facts]
    desired = ctx.pool.base_replicas()
    complete = len(bound) == len(live) >= desired > 0
    gpus = _pod_gpus(ctx.template)
    cost_per_hour: float | None = None
    report_text = f"measuring: {len(bound)} of {desired} replicas bound"
    if complete and not prices.empty:
        nodes = {
            p.node: NodeCost(ctx.node_facts[p.node].labels, ctx.node_facts[p.node].gpus)
            for p in bound
            if p.node
        }
        report = pool_cost(
            (PodCost(p.name, p.node or "", gpus) for p in bound), nodes, prices, limit
        )
        cost_per_hour, report_text = report.per_hour, report.reason
    elif prices.empty:
        report_text = "no price table (scheduling.prices): cost not measured"
    decision = ctx.decision
    ttft = decision.expected_ttft_s if decision is not None else None
    slo = ctx.pool.autoscaling.ttft_s if ctx.pool.autoscaling is not None else None
    spot: Mapping[str, Any] = mem.get("spot") or {}
    inputs = CostInputs(
        expected_ttft_s=0.0 if ttft is None or math.isinf(ttft) else ttft,
        slo_ttft_s=slo if ttft is not None else None,
        slo_headroom_ms=headroom,
        replicas=desired,
        max_replicas=ctx.pool.max_replicas,
        cost_per_hour=cost_per_hour,
        max_cost_per_hour=limit,
        spot_enabled=block.get("spotEnabled") is True,
        spot_disabled=bool(spot.get("disabled")),
        spot_available=_spot_can_host(ctx),
        replicas_on_spot=int(spot.get("onSpot", 0)),
        spot_replicas_allowed=int(spot.get("allowed", 0)),
        model=model,
        primary_model=primary,
        fallback_model=fallback or "",
        fallback_on_cost=trigger.get("costExceeded") is True,
        fallback_on_slo_risk=trigger.get("sloAtRisk") is True,
    )
    if ttft is not None and math.isinf(ttft) and slo is not None:
        inputs = _replace_ttft(inputs, slo)
    if not complete:  # replicas pending or being replaced: the last decision stands
        _cost_status(
            ctx,
            str(mem.get("action") or Action.KEEP),
            f"waiting: {report_text}",
            cost_per_hour,
            limit,
            report_text,
            model,
        )
        if model and model != primary:
            ctx.set_model(model)
        return
    result = decide(inputs)
    action, reason = result.action, result.reason
    if (
        result.action is Action.KEEP
        and model != primary
        and model == fallback
        and cost_per_hour is not None
        and limit is not None
        and cost_per_hour <= limit * RETURN_MARGIN
    ):
        action = Action.LARGER_MODEL
        reason = (
            f"cost ${cost_per_hour:.2f}/h is at most {RETURN_MARGIN:.0%} of maxCostPerHour "
            f"${limit:.2f}: back to {primary} from {fallback}"
        )
        result = dataclasses.replace(result, action=action, reason=reason, model=primary)
    if result.model is not None:
        model = result.model
    mem["model"] = model
    if model and model != (ctx.template.get("metadata", {}).get("annotations") or {}).get(
        MODEL_ANNOTATION
    ):
        ctx.set_model(model)
    if action is Action.SCALE_UP and result.replicas is not None:
        ctx.scale_to = result.replicas
    if action is Action.USE_ON_DEMAND:
        ctx.spot_slots = 0
    _cost_status(ctx, str(action), reason, cost_per_hour, limit, report_text, model)
    if mem.get("action") != str(action):
        if mem.get("action") is not None or action is not Action.KEEP:
            event = "".join(w.capitalize() for w in str(action).split("-"))
            event = "KeepAsIs" if action is Action.KEEP else event
            ctx.events.append(PolicyEvent(event, reason))
        mem["action"] = str(action)


def _spot_can_host(ctx: PolicyContext) -> bool:
    """Whether some spot node could take one more of the pool's pods now (its selectors,
    affinity and tolerations, GPUs free): spot nodes that cannot are no reason to try spot."""
    return any(
        capacity_type(f.labels) == SPOT
        and can_host(name, f.labels, f.taints, f.gpus, f.free, ctx.template)
        for name, f in ctx.node_facts.items()
    )


def _cost_status(
    ctx: PolicyContext,
    action: str,
    reason: str,
    cost_per_hour: float | None,
    limit: float | None,
    report: str,
    model: str,
) -> None:
    fields = {
        "action": action,
        "reason": reason,
        "costPerHour": cost_per_hour,
        "maxCostPerHour": limit,
        "cost": report,
        "model": model or None,
    }
    ctx.status["cost"] = {k: v for k, v in fields.items() if v is not None}


def _replace_ttft(inputs: CostInputs, slo: float) -> CostInputs:
    """An unbounded expected TTFT (no throughput yet) is read as just past the SLO."""
    return dataclasses.replace(inputs, expected_ttft_s=slo + 1.0)
