"""The guide's ``costOptimization`` cost/SLO policy (:mod:`..hooks`): what the pool's pods cost
per hour (``maxCostPerHour``), and the decision tree's answer (:mod:`.decision`: scale up, go
on-demand, ``fallbackModel`` and back) turned into template edits, status and Events. The spot
half of ``costOptimization`` is :mod:`.spot`.

::

    pool_cost(pods, nodes, prices, max_cost_per_hour=None) -> CostReport

``pods`` are ``PodCost(name, node, gpus)`` for the pool's bound pods; ``nodes`` map a node name to
``NodeCost(labels, gpus)``; ``prices`` is the coordinator's ``scheduling.prices``
(:class:`~coordinator.core.framework.prices.PriceTable`). A pod pays its share of its node: the
node's price (spot price on a spot node) times its GPUs over the node's GPUs, or the whole node's
price when either counts no GPUs; a node never costs more than its price. Pods on nodes the table
does not price are listed in ``unpriced`` and cost nothing in the total (the report says so).

``ctx.inputs["prices"]`` is the configuration's ``scheduling.prices`` (a ``PriceTable``, or a
callable returning the one in force).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from coordinator.core.framework.prices import SPOT, PriceTable, capacity_type
from coordinator.neuronetes.decide.hooks import PolicyContext, PolicyEvent
from coordinator.neuronetes.decide.podtemplate import MODEL_ANNOTATION
from coordinator.neuronetes.decide.policy.decision import Action, CostInputs, decide
from coordinator.neuronetes.decide.policy.errors import PolicyError
from coordinator.neuronetes.decide.policy.hosting import can_host

__all__ = ["RETURN_MARGIN", "CostReport", "NodeCost", "PodCost", "cost_policy", "pool_cost"]

#: Back from the fallback model only once the pool's cost is this far under maxCostPerHour.
RETURN_MARGIN: Final = 0.8


@dataclass(frozen=True, slots=True)
class PodCost:
    name: str
    node: str
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class NodeCost:
    labels: Mapping[str, str] = field(default_factory=dict)
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class CostReport:
    per_hour: float
    by_node: Mapping[str, float]
    unpriced: tuple[str, ...] = ()  # pods whose node has no price
    max_per_hour: float | None = None

    @property
    def exceeded(self) -> bool:
        return self.max_per_hour is not None and self.per_hour > self.max_per_hour

    @property
    def reason(self) -> str:
        text = f"pool costs ${self.per_hour:.2f}/h"
        if self.max_per_hour is not None:
            verb = "above" if self.exceeded else "within"
            text += f", {verb} maxCostPerHour ${self.max_per_hour:.2f}"
        if self.unpriced:
            text += f" ({len(self.unpriced)} pod(s) on nodes with no price: not counted)"
        return text


def pool_cost(
    pods: Iterable[PodCost],
    nodes: Mapping[str, NodeCost],
    prices: PriceTable,
    max_cost_per_hour: float | None = None,
) -> CostReport:
    if max_cost_per_hour is not None and max_cost_per_hour < 0:
        raise PolicyError(f"maxCostPerHour: cannot be negative ({max_cost_per_hour})")
    by_node: dict[str, float] = {}
    unpriced: list[str] = []
    for pod in pods:
        if pod.gpus < 0:
            raise PolicyError(f"pod {pod.name}: a negative GPU count ({pod.gpus})")
        node = nodes.get(pod.node)
        price = None if node is None else prices.node_price(node.labels, node.gpus)
        if node is None or price is None:
            unpriced.append(pod.name)
            continue
        share = pod.gpus / node.gpus if pod.gpus > 0 and node.gpus > 0 else 1.0
        # a node is never charged more than its price, however many of the pool's pods it runs
        by_node[pod.node] = min(price, by_node.get(pod.node, 0.0) + price * min(1.0, share))
    return CostReport(
        per_hour=round(sum(by_node.values()), 6),
        by_node=by_node,
        unpriced=tuple(unpriced),
        max_per_hour=max_cost_per_hour,
    )


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
    block = ctx.block("costOptimization")
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
