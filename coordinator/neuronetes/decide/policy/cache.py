"""The guide's ``cacheAware`` block as a per-pool policy (:mod:`..hooks`):
``preloadStrategy.minCachedReplicas`` counted against the nodes whose model cache (the
inventory's ``topos.io/models``) holds the pool's model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.core.podspec.poolkeys import holds_model
from coordinator.neuronetes.decide.conditions import Condition
from coordinator.neuronetes.decide.hooks import NodeFacts, PolicyContext
from coordinator.neuronetes.decide.podtemplate import MODEL_ANNOTATION
from coordinator.neuronetes.decide.policy.errors import PolicyError

__all__ = ["cache_policy", "holds_model", "selects"]


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
    block = ctx.block("cacheAware")
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
