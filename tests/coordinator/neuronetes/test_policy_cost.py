"""The cost/SLO decision tree and the ``maxCostPerHour`` check, as the AgentPool controller calls
them: each branch of the guide's tree gives its action and a reason a person can read, and the
pool's cost comes from its pods' nodes by the price table."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.app.config.prices import read_prices
from coordinator.neuronetes.decide.policy import PolicyError
from coordinator.neuronetes.decide.policy.cost import NodeCost, PodCost, pool_cost
from coordinator.neuronetes.decide.policy.decision import Action, CostInputs, decide

MET: dict[str, Any] = {"expected_ttft_s": 0.4, "slo_ttft_s": 2.0, "slo_headroom_ms": 1000}
AT_RISK: dict[str, Any] = {"expected_ttft_s": 1.5, "slo_ttft_s": 2.0, "slo_headroom_ms": 1000}
MODELS: dict[str, Any] = {"model": "big", "primary_model": "big", "fallback_model": "smaller-model"}


def inputs(**kw: Any) -> CostInputs:
    return CostInputs(**{"replicas": 2, "max_replicas": 4, **kw})


def test_slo_met_and_spot_available_uses_spot() -> None:
    got = decide(
        inputs(
            **MET,
            spot_enabled=True,
            spot_available=True,
            replicas_on_spot=0,
            spot_replicas_allowed=1,
            cost_per_hour=60,
        )
    )
    assert got.action is Action.USE_SPOT
    assert got.reason == "SLO met at $60.00/h: placing replicas on spot (0 of 1 allowed)"


def test_slo_met_and_cost_exceeded_falls_back_to_the_smaller_model() -> None:
    got = decide(
        inputs(**MET, **MODELS, cost_per_hour=60, max_cost_per_hour=50, fallback_on_cost=True)
    )
    assert (got.action, got.model) == (Action.FALLBACK_MODEL, "smaller-model")
    assert "above maxCostPerHour $50.00" in got.reason
    # already on the fallback, or the trigger off: keep, saying the budget is exceeded
    kept = decide(
        inputs(**MET, **{**MODELS, "model": "smaller-model"}, cost_per_hour=60,
               max_cost_per_hour=50, fallback_on_cost=True)
    )  # fmt: skip
    assert kept.action is Action.KEEP
    assert "above maxCostPerHour" in kept.reason


def test_spot_used_up_or_disabled_keeps_as_is() -> None:
    full = inputs(**MET, spot_enabled=True, spot_available=True, replicas_on_spot=1,
                  spot_replicas_allowed=1)  # fmt: skip
    assert decide(full).action is Action.KEEP
    off = inputs(**MET, spot_enabled=True, spot_disabled=True, spot_available=True,
                 spot_replicas_allowed=2)  # fmt: skip
    assert decide(off).action is Action.KEEP


def test_slo_at_risk_scales_up_then_on_demand_then_model() -> None:
    assert decide(inputs(**AT_RISK)).action is Action.SCALE_UP
    assert decide(inputs(**AT_RISK)).replicas == 3
    at_max = {"replicas": 4, "max_replicas": 4}
    spot = decide(inputs(**AT_RISK, **at_max, replicas_on_spot=2))
    assert spot.action is Action.USE_ON_DEMAND
    assert "moving 2 replica(s) off spot" in spot.reason
    faster = decide(inputs(**AT_RISK, **at_max, **MODELS, fallback_on_slo_risk=True))
    assert (faster.action, faster.model) == (Action.FALLBACK_MODEL, "smaller-model")
    larger = decide(inputs(**AT_RISK, **at_max, **{**MODELS, "model": "smaller-model"}))
    assert (larger.action, larger.model) == (Action.LARGER_MODEL, "big")
    stuck = decide(inputs(**AT_RISK, **at_max))
    assert stuck.action is Action.KEEP
    assert "expected TTFT 1.50s is above the SLO 2s less 1000ms headroom" in stuck.reason


def test_bad_inputs_name_the_field() -> None:
    with pytest.raises(PolicyError, match="max_cost_per_hour: cannot be negative"):
        inputs(**MET, max_cost_per_hour=-1)


PRICES = read_prices(
    {
        "instanceTypes": {"p4d.24xlarge": {"onDemand": 32.0, "spot": 10.0}},
        "gpuModels": {"A100": 4.0},
    }
)
NODES = {
    "od": NodeCost({"node.kubernetes.io/instance-type": "p4d.24xlarge"}, gpus=8),
    "spot": NodeCost(
        {"node.kubernetes.io/instance-type": "p4d.24xlarge", "karpenter.sh/capacity-type": "spot"},
        gpus=8,
    ),
    "gpu-priced": NodeCost({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, gpus=4),
    "unknown": NodeCost({}, gpus=8),
}


def test_the_pool_pays_its_share_of_each_node() -> None:
    pods = [
        PodCost("a", "od", gpus=4),  # half of $32
        PodCost("b", "spot", gpus=8),  # all of $10 on spot
        PodCost("c", "gpu-priced", gpus=2),  # 2 of 4 GPUs at 4 × $4
        PodCost("d", "unknown", gpus=1),
    ]
    report = pool_cost(pods, NODES, PRICES, max_cost_per_hour=30)
    assert report.per_hour == pytest.approx(16 + 10 + 8)
    assert report.exceeded
    assert report.unpriced == ("d",)
    assert report.reason == (
        "pool costs $34.00/h, above maxCostPerHour $30.00 "
        "(1 pod(s) on nodes with no price: not counted)"
    )
    within = pool_cost(pods[:1], NODES, PRICES, max_cost_per_hour=30)
    assert not within.exceeded
    assert within.reason == "pool costs $16.00/h, within maxCostPerHour $30.00"


def test_a_node_never_costs_more_than_its_price() -> None:
    pods = [PodCost(f"cpu-{i}", "od") for i in range(3)]
    assert pool_cost(pods, NODES, PRICES).per_hour == pytest.approx(32)


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(PolicyError, match="maxCostPerHour: cannot be negative"):
        pool_cost([], NODES, PRICES, max_cost_per_hour=-5)
