"""The guide's ``carbonAware`` and ``cacheAware`` blocks as per-pool policies (:mod:`.hooks`).

``ctx.inputs["intensities"]`` is a callable returning the intensity source's last
:class:`~coordinator.neuronetes.decide.policy.carbon.Intensities` (``None``: no source
configured); the controller's refresh task keeps it current and pushes the same values into the
scheduler's ``CarbonReadings`` (PoolPlacement refuses regions above ``maxCarbonIntensity``).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

from coordinator.neuronetes.decide.conditions import Condition
from coordinator.neuronetes.decide.hooks import CLEAN_ENERGY_GATE, NodeFacts, PolicyContext
from coordinator.neuronetes.decide.podtemplate import MODEL_ANNOTATION
from coordinator.neuronetes.decide.policy.carbon import CleanHours, Intensities, check_regions
from coordinator.neuronetes.decide.policy.errors import PolicyError

__all__ = ["REGION_LABEL", "cache_policy", "carbon_policy", "holds_model", "selects"]

REGION_LABEL = "topology.kubernetes.io/region"


def _enabled(block: object) -> Mapping[str, Any] | None:
    if not isinstance(block, Mapping) or block.get("enabled", True) is False:
        return None
    return block


def carbon_policy(ctx: PolicyContext) -> None:
    """Readings: ``CarbonIntensityAvailable`` says whether the source's last fetch worked (the
    last good values are kept, with their age). Time shifting: the pool's new pods are held by
    ``neuronetes.io/clean-energy-window`` outside ``cleanEnergyHours``, while every preferred
    region with a reading is above ``maxCarbonIntensity``, or before the source's first answer
    (a source that failed does not hold them: it cannot say); inside, the gate is lifted from held
    pods in place. ``status.policy.carbon`` says which and why; ``CleanEnergyWindow=False``
    while held."""
    block = _enabled(ctx.pool.scheduling.get("carbonAware"))
    if block is None:
        return
    source: Callable[[], Intensities | None] = ctx.inputs.get("intensities") or (lambda: None)
    readings = source()
    preferred = [str(r) for r in block.get("preferredRegions") or ()]
    most = block.get("maxCarbonIntensity")
    if most is not None and (isinstance(most, bool) or not isinstance(most, int | float)):
        raise PolicyError(f"carbonAware.maxCarbonIntensity: must be a number, not {most!r}")
    status: dict[str, Any] = {}
    values: Mapping[str, float] = {}
    if readings is None:
        status["intensity"] = "no carbon intensity source configured"
    else:
        values = readings.values
        status["intensity"] = readings.describe(ctx.inputs.get("clock", lambda: 0.0)())
        status["regions"] = {r: values[r] for r in preferred if r in values} or None
        if readings.error:
            ctx.conditions.append(
                Condition(
                    "CarbonIntensityAvailable",
                    "False",
                    "SourceFailed",
                    status["intensity"],
                )
            )
        elif readings.fetched_at is not None:
            ctx.conditions.append(
                Condition("CarbonIntensityAvailable", "True", "Read", status["intensity"])
            )
    known = {f.labels[REGION_LABEL] for f in ctx.node_facts.values() if REGION_LABEL in f.labels}
    problems = check_regions(preferred, known | set(values)) if known else []
    if problems:
        ctx.conditions.append(
            Condition("PreferredRegionsKnown", "False", "UnknownRegion", "; ".join(problems))
        )
    shifting = _enabled(block.get("timeShifting"))
    if shifting is not None:
        hours = CleanHours.parse(str(shifting.get("cleanEnergyHours", "")))
        now = datetime.datetime.fromtimestamp(ctx.now, datetime.UTC)
        verdict = hours.gate(now)
        hold, reason = verdict.hold, verdict.reason
        measured = [r for r in preferred if r in values]
        first = readings is not None and readings.fetched_at is None and not readings.error
        if not hold and most is not None and first:
            hold = True
            reason = f"held by {CLEAN_ENERGY_GATE}: waiting for the first carbon intensity reading"
        if not hold and most is not None and measured and all(values[r] > most for r in measured):
            hold = True
            worst = ", ".join(f"{r} {values[r]:g}" for r in measured)
            reason = (
                f"held by {CLEAN_ENERGY_GATE}: every preferred region is above "
                f"maxCarbonIntensity {most:g} gCO2/kWh ({worst})"
            )
        ctx.set_gate(CLEAN_ENERGY_GATE, hold)
        status.update(held=hold, reason=reason)
        if verdict.opens_at is not None and verdict.hold:
            status["opensAt"] = verdict.opens_at.isoformat()
        if hold:
            ctx.conditions.append(Condition("CleanEnergyWindow", "False", "Held", reason))
        else:
            ctx.conditions.append(Condition("CleanEnergyWindow", "True", "Open", reason))
    ctx.status["carbon"] = status


def holds_model(models: frozenset[str], model: str) -> bool:
    """Whether a node's cached ``models`` include ``model`` (case-insensitive; a name without
    an org matches that name under any org), as the ModelCache scorer reads them."""
    want = model.lower()
    return any(
        m.lower() == want or ("/" not in want and m.lower().rpartition("/")[2] == want)
        for m in models
    )


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes ``labelSelector`` (``matchLabels``, ``matchExpressions``) against labels."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(str(key)) != str(value):
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op = str(expr.get("key")), expr.get("operator")
        values = [str(v) for v in expr.get("values") or ()]
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise PolicyError(
                f"cacheAware.preloadStrategy.nodes.labelSelector: unknown operator {op!r}"
            )
    return True


def cache_policy(ctx: PolicyContext) -> None:
    """``preloadStrategy.minCachedReplicas``: how many nodes matching
    ``preloadStrategy.nodes.labelSelector`` (every node without one) hold the pool's model, in
    ``status.policy.cache``; ``ModelCached=False`` (a Warning Event) while fewer than asked."""
    block = _enabled(ctx.pool.scheduling.get("cacheAware"))
    preload = (block or {}).get("preloadStrategy")
    if not isinstance(preload, Mapping) or preload.get("minCachedReplicas") is None:
        return
    want = preload["minCachedReplicas"]
    if isinstance(want, bool) or not isinstance(want, int) or want < 0:
        raise PolicyError(
            "cacheAware.preloadStrategy.minCachedReplicas: must be a whole number ≥ 0, "
            f"not {want!r}"
        )
    selector = (preload.get("nodes") or {}).get("labelSelector") or {}
    annotations = ctx.template.get("metadata", {}).get("annotations") or {}
    model = annotations.get(MODEL_ANNOTATION) or ctx.pool.model
    if not model:
        ctx.status["cache"] = {"minCachedReplicas": want, "cachedNodes": 0}
        ctx.conditions.append(
            Condition("ModelCached", "False", "NoModel", "the pool names no model (spec.model)")
        )
        return
    eligible: dict[str, NodeFacts] = {
        name: f for name, f in ctx.node_facts.items() if selects(selector, f.labels)
    }
    holding = sorted(n for n, f in eligible.items() if holds_model(f.models, model))
    ctx.status["cache"] = {
        "model": model,
        "minCachedReplicas": want,
        "cachedNodes": len(holding),
        "nodes": holding,
    }
    text = (
        f"{len(holding)} of {len(eligible)} selected node(s) hold {model} in their cache "
        f"(minCachedReplicas {want})"
    )
    if len(holding) < want:
        ctx.conditions.append(Condition("ModelCached", "False", "BelowMinCachedReplicas", text))
    else:
        ctx.conditions.append(Condition("ModelCached", "True", "Cached", text))
