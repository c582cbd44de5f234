"""The guide's cost/SLO decision tree, as one pure function.

::

    decide(CostInputs(...)) -> CostDecision(action, reason, model=None, replicas=None)

1. SLO at risk (``expected_ttft + sloHeadroomMs > slo.ttft``) → improve performance, first that
   applies: ``scale-up`` (below maxReplicas), ``use-on-demand`` (replicas on spot),
   ``fallback-model`` (``fallbackTrigger.sloAtRisk``: the smaller model is the faster one),
   ``larger-model`` (running the fallback: back to the pool's own model); else ``keep`` with
   the reason nothing is left to try.
2. SLO met → reduce cost, first that applies: ``use-spot`` (spotEnabled, spot nodes exist, spot
   not disabled, fewer replicas on spot than maxSpotPercent allows), ``fallback-model``
   (``fallbackTrigger.costExceeded`` and the cost above ``maxCostPerHour``); else ``keep``.

Every decision carries a one-line reason for the pool's status and its Event. Without an SLO
(``slo_ttft_s`` None) the SLO counts as met.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from coordinator.neuronetes.decide.policy.errors import PolicyError

__all__ = ["Action", "CostDecision", "CostInputs", "decide"]


class Action(enum.StrEnum):
    KEEP = "keep"
    USE_SPOT = "use-spot"
    FALLBACK_MODEL = "fallback-model"
    SCALE_UP = "scale-up"
    USE_ON_DEMAND = "use-on-demand"
    LARGER_MODEL = "larger-model"


@dataclass(frozen=True, slots=True, kw_only=True)
class CostInputs:
    expected_ttft_s: float
    slo_ttft_s: float | None = None
    slo_headroom_ms: float = 0.0
    replicas: int
    max_replicas: int
    cost_per_hour: float | None = None  # what the pool's pods cost now (cost.pool_cost)
    max_cost_per_hour: float | None = None
    spot_enabled: bool = False
    spot_disabled: bool = False  # after too many interruptions (spot.InterruptionTracker)
    spot_available: bool = False  # spot nodes exist that the pool's pods could use
    replicas_on_spot: int = 0
    spot_replicas_allowed: int = 0  # spot.spot_replicas_allowed(desired, maxSpotPercent)
    model: str = ""  # the model the pool runs now
    primary_model: str = ""  # the pool's own model (spec)
    fallback_model: str = ""
    fallback_on_cost: bool = False  # fallbackTrigger.costExceeded
    fallback_on_slo_risk: bool = False  # fallbackTrigger.sloAtRisk

    def __post_init__(self) -> None:
        for name in ("expected_ttft_s", "slo_headroom_ms"):
            if getattr(self, name) < 0:
                raise PolicyError(f"{name}: cannot be negative ({getattr(self, name)})")
        for name in ("slo_ttft_s", "cost_per_hour", "max_cost_per_hour"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise PolicyError(f"{name}: cannot be negative ({value})")
        if self.replicas < 0 or self.max_replicas < 0:
            raise PolicyError("replicas and max_replicas cannot be negative")


@dataclass(frozen=True, slots=True)
class CostDecision:
    action: Action
    reason: str
    model: str | None = None  # the model to switch the template to
    replicas: int | None = None  # the replica count to scale to


def decide(i: CostInputs) -> CostDecision:
    """The action the decision tree takes for a pool now (see the module docstring)."""
    if i.slo_ttft_s is not None:
        budget = i.slo_ttft_s - i.slo_headroom_ms / 1000
        if i.expected_ttft_s > budget:
            return _improve(
                i,
                f"expected TTFT {i.expected_ttft_s:.2f}s is above the SLO "
                f"{i.slo_ttft_s:g}s less {i.slo_headroom_ms:g}ms headroom",
            )
    return _reduce(i)


def _improve(i: CostInputs, why: str) -> CostDecision:
    if i.replicas < i.max_replicas:
        return CostDecision(
            Action.SCALE_UP, f"{why}: scaling up to {i.replicas + 1}", replicas=i.replicas + 1
        )
    if i.replicas_on_spot > 0:
        return CostDecision(
            Action.USE_ON_DEMAND,
            f"{why} at maxReplicas {i.max_replicas}: moving {i.replicas_on_spot} replica(s) "
            "off spot to on-demand",
        )
    if i.fallback_on_slo_risk and i.fallback_model and i.model != i.fallback_model:
        return CostDecision(
            Action.FALLBACK_MODEL,
            f"{why} at maxReplicas {i.max_replicas}: switching to the faster {i.fallback_model}",
            model=i.fallback_model,
        )
    if i.primary_model and i.model != i.primary_model:
        return CostDecision(
            Action.LARGER_MODEL,
            f"{why} at maxReplicas {i.max_replicas}: back to {i.primary_model} from {i.model}",
            model=i.primary_model,
        )
    return CostDecision(Action.KEEP, f"{why}; at maxReplicas {i.max_replicas}, nothing left to try")


def _reduce(i: CostInputs) -> CostDecision:
    exceeded = (
        i.cost_per_hour is not None
        and i.max_cost_per_hour is not None
        and i.cost_per_hour > i.max_cost_per_hour
    )
    cost = "" if i.cost_per_hour is None else f" at ${i.cost_per_hour:.2f}/h"
    if (
        i.spot_enabled
        and not i.spot_disabled
        and i.spot_available
        and i.replicas_on_spot < min(i.replicas, i.spot_replicas_allowed)
    ):
        return CostDecision(
            Action.USE_SPOT,
            f"SLO met{cost}: placing replicas on spot ({i.replicas_on_spot} of "
            f"{i.spot_replicas_allowed} allowed)",
        )
    if exceeded and i.fallback_on_cost and i.fallback_model and i.model != i.fallback_model:
        return CostDecision(
            Action.FALLBACK_MODEL,
            f"SLO met{cost}, above maxCostPerHour ${i.max_cost_per_hour:.2f}: switching to "
            f"{i.fallback_model}",
            model=i.fallback_model,
        )
    if exceeded:
        return CostDecision(
            Action.KEEP,
            f"cost{cost} is above maxCostPerHour ${i.max_cost_per_hour:.2f} and no cheaper "
            "option is enabled",
        )
    return CostDecision(Action.KEEP, f"SLO met{cost}; nothing cheaper to do")
