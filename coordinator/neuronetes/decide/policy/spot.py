"""The guide's ``costOptimization`` spot capacity, and :func:`spot_policy`, the per-pool policy
(:mod:`..hooks`) that applies it: interruptions counted per window, the share of replicas on
spot, and the node affinity that keeps new pods on on-demand nodes.

::

    SpotSettings.from_pool(cost_optimization)      # the pool's spec.scheduling.costOptimization
    tracker = InterruptionTracker(settings)
    for node in lost_spot_nodes(before, now_names, pool_nodes): tracker.record(node, at=t)
    tracker.verdict(now) -> SpotVerdict(disabled, count, reason)
    spot_replicas_allowed(desired, max_spot_percent) -> int
    on_demand(template) -> the template with ON_DEMAND_AFFINITY required

An interruption is a spot node (``karpenter.sh/capacity-type: spot`` /
``eks.amazonaws.com/capacityType: SPOT``) that disappears while it runs pods of the pool.
``spotMaxInterruptions: N`` (per hour) disables spot at the (N+1)th interruption within an hour;
``interruptionThreshold: {count: C, window: W, action: disable-spot}`` at the Cth within W (when
both are given, the threshold wins). Once disabled, and for replacements of interrupted pods
when ``spotStrategy.onInterruption: migrate-to-on-demand``, the policy allows no spot slots and
the controller gives the pods it creates :data:`ON_DEMAND_AFFINITY` (:func:`on_demand`).
"""

from __future__ import annotations

import copy
import math
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

from coordinator.core.framework.prices import CAPACITY_TYPE_LABELS, SPOT, capacity_type
from coordinator.core.podspec.durations import DurationError, parse_duration
from coordinator.neuronetes.decide.conditions import Condition
from coordinator.neuronetes.decide.hooks import PolicyContext, PolicyEvent
from coordinator.neuronetes.decide.podtemplate import require_everywhere
from coordinator.neuronetes.decide.policy.errors import PolicyError

__all__ = [
    "ON_DEMAND_AFFINITY",
    "InterruptionTracker",
    "SpotSettings",
    "SpotVerdict",
    "lost_spot_nodes",
    "on_demand",
    "spot_policy",
    "spot_replicas_allowed",
]

INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"

#: Required node affinity: no node whose capacity-type label says spot (nodes without the
#: labels still match — an unlabelled node is not known to be spot).
ON_DEMAND_AFFINITY: Final[Mapping[str, Any]] = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": CAPACITY_TYPE_LABELS[0], "operator": "NotIn", "values": ["spot"]},
                        {"key": CAPACITY_TYPE_LABELS[1], "operator": "NotIn", "values": ["SPOT"]},
                    ]
                }
            ]
        }
    }
}
_MIGRATE: Final = "migrate-to-on-demand"
_HOUR: Final = 3600.0


@dataclass(frozen=True, slots=True)
class SpotSettings:
    enabled: bool = False
    max_spot_percent: int = 100
    limit: int | None = None  # interruptions within ``window_s`` that disable spot
    window_s: float = _HOUR
    migrate_on_interruption: bool = False

    @classmethod
    def from_pool(cls, cost: Mapping[str, Any] | None) -> SpotSettings:
        """From ``spec.scheduling.costOptimization`` (``None``/disabled: spot off)."""
        if not cost or cost.get("enabled", True) is False:
            return cls()
        where = "costOptimization"
        strategy = cost.get("spotStrategy") or {}
        if not isinstance(strategy, Mapping):
            raise PolicyError(f"{where}.spotStrategy: must be an object")
        percent = strategy.get("maxSpotPercent", 100)
        if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
            raise PolicyError(
                f"{where}.spotStrategy.maxSpotPercent: must be 0 to 100, not {percent!r}"
            )
        on = strategy.get("onInterruption")
        if on is not None and on != _MIGRATE:
            raise PolicyError(f"{where}.spotStrategy.onInterruption: {on!r} is not {_MIGRATE}")
        limit: int | None = None
        window = _HOUR
        most = cost.get("spotMaxInterruptions")
        if most is not None:
            limit = _count(f"{where}.spotMaxInterruptions", most, at_least=0) + 1
        threshold = cost.get("interruptionThreshold")
        if threshold is not None:
            if not isinstance(threshold, Mapping):
                raise PolicyError(f"{where}.interruptionThreshold: must be an object")
            action = threshold.get("action", "disable-spot")
            if action != "disable-spot":
                raise PolicyError(
                    f"{where}.interruptionThreshold.action: {action!r} is not disable-spot"
                )
            limit = _count(
                f"{where}.interruptionThreshold.count", threshold.get("count"), at_least=1
            )
            try:
                window = parse_duration(str(threshold.get("window", "1h")))
            except DurationError as exc:
                raise PolicyError(f"{where}.interruptionThreshold.window: {exc}") from None
        return cls(
            enabled=cost.get("spotEnabled") is True,
            max_spot_percent=percent,
            limit=limit,
            window_s=window,
            migrate_on_interruption=on == _MIGRATE,
        )


def _count(path: str, value: object, *, at_least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < at_least:
        raise PolicyError(f"{path}: must be a whole number of at least {at_least}, not {value!r}")
    return value


def lost_spot_nodes(
    before: Mapping[str, Mapping[str, str]], now: Collection[str], pool_nodes: Collection[str]
) -> list[str]:
    """Spot nodes (by ``before``'s labels) that ran pool pods and are gone from ``now``."""
    return sorted(
        n
        for n, labels in before.items()
        if n not in now and n in pool_nodes and capacity_type(labels) == SPOT
    )


@dataclass(frozen=True, slots=True)
class SpotVerdict:
    disabled: bool
    count: int
    reason: str


class InterruptionTracker:
    """Interruptions of one pool's spot nodes in a sliding window (seconds on any one clock)."""

    def __init__(self, settings: SpotSettings) -> None:
        self.settings = settings
        self._times: deque[float] = deque()
        self._seen: set[str] = set()
        self.disabled = False  # once disabled, spot stays off (the controller may reset it)

    def record(self, node: str, *, at: float) -> None:
        """Count ``node``'s disappearance once (a node name reported twice counts once)."""
        if node in self._seen:
            return
        self._seen.add(node)
        self._times.append(at)

    def count(self, now: float) -> int:
        while self._times and self._times[0] <= now - self.settings.window_s:
            self._times.popleft()
        return len(self._times)

    def verdict(self, now: float) -> SpotVerdict:
        count = self.count(now)
        limit = self.settings.limit
        window = _window_text(self.settings.window_s)
        if limit is not None and count >= limit:
            self.disabled = True
        if self.disabled:
            return SpotVerdict(
                True,
                count,
                f"disable-spot: {count} spot interruption(s) in the last {window} "
                f"(limit {limit}); new replicas go to on-demand nodes",
            )
        return SpotVerdict(False, count, f"{count} spot interruption(s) in the last {window}")


def _window_text(seconds: float) -> str:
    if seconds % _HOUR == 0:
        return f"{seconds / _HOUR:g}h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def spot_replicas_allowed(desired: int, max_spot_percent: int) -> int:
    """How many of ``desired`` replicas may run on spot (rounded down)."""
    if desired < 0:
        raise PolicyError(f"replicas: cannot be negative ({desired})")
    if not 0 <= max_spot_percent <= 100:
        raise PolicyError(f"maxSpotPercent: must be 0 to 100, not {max_spot_percent}")
    return math.floor(desired * max_spot_percent / 100)


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
    block = ctx.block("costOptimization")
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
