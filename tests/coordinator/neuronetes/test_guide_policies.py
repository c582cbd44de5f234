"""The guide's cost, spot, carbon and cache policies as the controller runs them on a pool (pure):
what they do to the template, the pods created, the status and the Events."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from common import podkeys
from coordinator.app.config.prices import read_prices
from coordinator.core.podspec.tolerations import Taint
from coordinator.neuronetes.decide.hooks import (
    CLEAN_ENERGY_GATE,
    NodeFacts,
    PolicyContext,
    run_policies,
)
from coordinator.neuronetes.decide.podtemplate import pool_template
from coordinator.neuronetes.decide.policy import GUIDE_POLICIES
from coordinator.neuronetes.decide.policy.cache import cache_policy
from coordinator.neuronetes.decide.policy.carbon import Intensities, carbon_policy
from coordinator.neuronetes.decide.policy.cost import cost_policy
from coordinator.neuronetes.decide.policy.spot import on_demand, spot_policy
from coordinator.neuronetes.decide.pool import parse_pool
from coordinator.neuronetes.decide.replicas import OwnedPod
from coordinator.neuronetes.decide.scaling import Decision

SPOT = {"karpenter.sh/capacity-type": "spot", "node.kubernetes.io/instance-type": "p4d.24xlarge"}
ON_DEMAND = {"karpenter.sh/capacity-type": "on-demand"}
PRICES = read_prices({"instanceTypes": {"big.gpu": 40.0, "cheap.gpu": 8.0}})
NOON = datetime.datetime(2026, 1, 5, 12, 0, tzinfo=datetime.UTC).timestamp()
NIGHT = datetime.datetime(2026, 1, 5, 23, 0, tzinfo=datetime.UTC).timestamp()


def _pod(name: str, node: str | None) -> OwnedPod:
    return OwnedPod(name, f"uid-{name}", 0.0, node, "Running", False, True, "h")


def _ctx(
    spec: dict[str, Any],
    *,
    pods: tuple[OwnedPod, ...] = (),
    nodes: dict[str, NodeFacts] | None = None,
    memory: dict[str, Any] | None = None,
    now: float = NOON,
    inputs: dict[str, Any] | None = None,
    decision: Decision | None = None,
) -> PolicyContext:
    pool = parse_pool({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec})
    return PolicyContext(
        pool=pool,
        raw={},
        template=pool_template(pool, scheduler_name=podkeys.AGENT_POOL_SCHEDULER_NAME),
        now=now,
        node_facts=nodes or {},
        pods=pods,
        memory={} if memory is None else memory,
        inputs={"prices": PRICES, **(inputs or {})},
        decision=decision,
    )


COST = {
    "model": "big-model",
    "replicas": 2,
    "gpuRequirements": {"count": 8},
    "scheduling": {
        "costOptimization": {
            "enabled": True,
            "sloHeadroomMs": 1000,
            "maxCostPerHour": 50.0,
            "fallbackModel": "smaller-model",
            "fallbackTrigger": {"costExceeded": True, "sloAtRisk": False},
        }
    },
}


def _nodes(instance: str) -> dict[str, NodeFacts]:
    labels = {"node.kubernetes.io/instance-type": instance}
    return {"n1": NodeFacts(labels, 8), "n2": NodeFacts(labels, 8)}


def test_cost_above_the_limit_switches_to_the_fallback_model_and_back_with_a_margin() -> None:
    memory: dict[str, Any] = {}
    pods = (_pod("a", "n1"), _pod("b", "n2"))
    ctx = run_policies(_ctx(COST, pods=pods, nodes=_nodes("big.gpu"), memory=memory), [cost_policy])
    assert ctx.template["metadata"]["annotations"]["neuronetes.io/model"] == "smaller-model"
    assert ctx.template["spec"]["containers"][0]["args"] == ["--model", "smaller-model"]
    cost = ctx.status["cost"]
    assert (cost["action"], cost["costPerHour"]) == ("fallback-model", 80.0)
    assert "above maxCostPerHour $50.00" in cost["reason"]
    assert [e.reason for e in ctx.events] == ["FallbackModel"]
    # Still above, already on the fallback: nothing cheaper left; the changed action is an Event.
    ctx = run_policies(_ctx(COST, pods=pods, nodes=_nodes("big.gpu"), memory=memory), [cost_policy])
    assert ctx.template["metadata"]["annotations"]["neuronetes.io/model"] == "smaller-model"
    assert [e.reason for e in ctx.events] == ["KeepAsIs"]
    assert "no cheaper option" in ctx.events[0].message
    # Cheaper nodes: 16 $/h is under 80 % of 50: back to the pool's own model.
    ctx = run_policies(
        _ctx(COST, pods=pods, nodes=_nodes("cheap.gpu"), memory=memory), [cost_policy]
    )
    assert ctx.template["metadata"]["annotations"]["neuronetes.io/model"] == "big-model"
    assert ctx.status["cost"]["action"] == "larger-model"
    assert [e.reason for e in ctx.events] == ["LargerModel"]


def test_cost_within_the_hysteresis_band_keeps_the_fallback() -> None:
    prices = read_prices({"instanceTypes": {"mid.gpu": 22.5}})  # 45 $/h: under 50, over 40
    memory: dict[str, Any] = {"model": "smaller-model"}
    pods = (_pod("a", "n1"), _pod("b", "n2"))
    ctx = _ctx(COST, pods=pods, nodes=_nodes("mid.gpu"), memory=memory, inputs={"prices": prices})
    run_policies(ctx, [cost_policy])
    assert ctx.template["metadata"]["annotations"]["neuronetes.io/model"] == "smaller-model"


def test_cost_is_not_measured_while_replicas_are_unbound() -> None:
    memory: dict[str, Any] = {"model": "smaller-model"}
    ctx = _ctx(COST, pods=(_pod("a", "n1"), _pod("b", None)), nodes=_nodes("cheap.gpu"))
    ctx.memory.update(memory)
    run_policies(ctx, [cost_policy])
    assert ctx.template["metadata"]["annotations"]["neuronetes.io/model"] == "smaller-model"
    assert ctx.status["cost"]["cost"] == "measuring: 1 of 2 replicas bound"


def test_slo_at_risk_with_the_headroom_scales_up() -> None:
    spec = {**COST, "maxReplicas": 4, "autoscaling": {"slo": {"ttftMs": 2000}}}
    pods = (_pod("a", "n1"), _pod("b", "n2"))
    # 1.5 s expected: within the SLO, but not with 1 s of headroom.
    ctx = _ctx(spec, pods=pods, nodes=_nodes("cheap.gpu"), decision=Decision(2, "", 1.5))
    run_policies(ctx, [cost_policy])
    assert ctx.scale_to == 3
    assert ctx.status["cost"]["action"] == "scale-up"
    assert [e.reason for e in ctx.events] == ["ScaleUp"]


def test_slo_at_risk_at_max_replicas_sends_new_pods_to_on_demand() -> None:
    spec = {**COST, "maxReplicas": 2, "autoscaling": {"slo": {"ttftMs": 2000}}}
    spot_node = {"n1": NodeFacts(SPOT, 8), "n2": NodeFacts(ON_DEMAND, 8)}
    pods = (_pod("a", "n1"), _pod("b", "n2"))
    ctx = _ctx(spec, pods=pods, nodes=spot_node, decision=Decision(2, "", 3.0))
    run_policies(ctx, [spot_policy, cost_policy])
    assert ctx.status["cost"]["action"] == "use-on-demand"
    assert "moving 1 replica(s) off spot" in ctx.status["cost"]["reason"]
    assert ctx.spot_slots == 0
    assert ctx.scale_to is None


def test_a_bad_cost_block_is_a_policy_failure_and_the_others_still_run() -> None:
    spec = {
        "model": "m",
        "scheduling": {
            "costOptimization": {"maxCostPerHour": -1},
            "cacheAware": {"preloadStrategy": {"minCachedReplicas": 1}},
        },
    }
    ctx = run_policies(_ctx(spec), GUIDE_POLICIES)
    by_type = {c.type: c for c in ctx.conditions}
    assert "maxCostPerHour" in by_type["PolicyFailed"].message
    assert by_type["ModelCached"].status == "False"


SPOTTY = {
    "replicas": 5,
    "scheduling": {
        "costOptimization": {
            "spotEnabled": True,
            "spotStrategy": {
                "instanceTypes": ["p4d.24xlarge", "p3dn.24xlarge"],
                "onInterruption": "migrate-to-on-demand",
                "maxSpotPercent": 80,
            },
            "interruptionThreshold": {"count": 2, "window": "1h", "action": "disable-spot"},
        }
    },
}


def test_max_spot_percent_caps_pods_that_may_go_to_spot_and_instance_types_are_preferred() -> None:
    ctx = run_policies(_ctx(SPOTTY, nodes={"s1": NodeFacts(SPOT)}), [spot_policy])
    assert ctx.spot_slots == 4  # 80 % of 5; the fifth pod is created on-demand only
    preferred = ctx.template["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert preferred[-1]["preference"]["matchExpressions"] == [
        {
            "key": "node.kubernetes.io/instance-type",
            "operator": "In",
            "values": ["p4d.24xlarge", "p3dn.24xlarge"],
        }
    ]
    pod = on_demand({"spec": {}})
    (term,) = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]} in term[
        "matchExpressions"
    ]


def test_spot_nodes_vanishing_under_the_pool_disable_spot_at_the_threshold() -> None:
    memory: dict[str, Any] = {}
    nodes = {"s1": NodeFacts(SPOT), "s2": NodeFacts(SPOT), "od": NodeFacts(ON_DEMAND)}
    pods = (_pod("a", "s1"), _pod("b", "s2"), _pod("c", "od"))
    run_policies(_ctx(SPOTTY, pods=pods, nodes=nodes, memory=memory), [spot_policy])
    del nodes["s1"]
    ctx = run_policies(_ctx(SPOTTY, pods=pods, nodes=nodes, memory=memory), [spot_policy])
    assert ctx.evict == {"a"}  # its node is gone: deleted and replaced
    assert ctx.spot_slots == 0  # migrate-to-on-demand: the replacement goes on-demand
    assert ctx.status["spot"]["interruptions"] == 1
    assert [c.status for c in ctx.conditions if c.type == "SpotEnabled"] == ["True"]
    assert [e.reason for e in ctx.events] == ["SpotInterruption"]
    del nodes["s2"]
    pods = (_pod("b", "s2"), _pod("c", "od"), _pod("d", "od"))
    ctx = run_policies(_ctx(SPOTTY, pods=pods, nodes=nodes, memory=memory), [spot_policy])
    (cond,) = [c for c in ctx.conditions if c.type == "SpotEnabled"]
    assert (cond.status, cond.reason) == ("False", "InterruptionLimit")
    assert "2 spot interruption(s) in the last 1h" in cond.message
    assert ctx.status["spot"]["enabled"] is False
    # From now on no new pod may go to spot.
    ctx = run_policies(_ctx(SPOTTY, pods=pods[1:], nodes=nodes, memory=memory), [spot_policy])
    assert ctx.spot_slots == 0


def test_an_on_demand_node_vanishing_is_no_interruption() -> None:
    memory: dict[str, Any] = {}
    nodes = {"od": NodeFacts(ON_DEMAND), "od2": NodeFacts(ON_DEMAND)}
    pods = (_pod("a", "od"),)
    run_policies(_ctx(SPOTTY, pods=pods, nodes=nodes, memory=memory), [spot_policy])
    del nodes["od"]
    ctx = run_policies(_ctx(SPOTTY, pods=pods, nodes=nodes, memory=memory), [spot_policy])
    assert ctx.evict == {"a"}
    assert ctx.status["spot"]["interruptions"] == 0


GREEN = {
    "scheduling": {
        "carbonAware": {
            "enabled": True,
            "preferredRegions": ["us-west-2", "eu-north-1"],
            "timeShifting": {"enabled": True, "cleanEnergyHours": "09:00-17:00"},
            "maxCarbonIntensity": 100,
        }
    }
}


def _readings(values: dict[str, float], error: str = "") -> dict[str, Any]:
    state = Intensities(values, 0.0, error)
    return {"intensities": lambda: state, "clock": lambda: 30.0}


def test_outside_the_clean_energy_window_new_pods_are_held() -> None:
    ctx = run_policies(_ctx(GREEN, now=NIGHT), [carbon_policy])
    assert ctx.gates() == [CLEAN_ENERGY_GATE]
    carbon = ctx.status["carbon"]
    assert carbon["held"] is True
    assert carbon["opensAt"] == "2026-01-06T09:00:00+00:00"
    assert "no carbon intensity source configured" in carbon["intensity"]
    (cond,) = ctx.conditions
    assert (cond.type, cond.status) == ("CleanEnergyWindow", "False")


def test_inside_the_window_pods_are_released_unless_every_region_is_too_dirty() -> None:
    ctx = run_policies(_ctx(GREEN, inputs=_readings({"us-west-2": 80})), [carbon_policy])
    assert ctx.gates() == []
    assert ctx.status["carbon"]["regions"] == {"us-west-2": 80}
    dirty = _readings({"us-west-2": 300, "eu-north-1": 150})
    ctx = run_policies(_ctx(GREEN, inputs=dirty), [carbon_policy])
    assert ctx.gates() == [CLEAN_ENERGY_GATE]
    assert (
        "every preferred region is above maxCarbonIntensity 100" in ctx.status["carbon"]["reason"]
    )


def test_before_the_first_reading_pods_are_held() -> None:
    first = {"intensities": lambda: Intensities(), "clock": lambda: 0.0}
    ctx = run_policies(_ctx(GREEN, inputs=first), [carbon_policy])
    assert ctx.gates() == [CLEAN_ENERGY_GATE]
    assert "waiting for the first carbon intensity reading" in ctx.status["carbon"]["reason"]


def test_a_failing_source_is_a_condition_and_the_last_values_are_kept() -> None:
    inputs = _readings({"us-west-2": 80}, error="http://carbon: no answer within 5s")
    ctx = run_policies(_ctx(GREEN, inputs=inputs), [carbon_policy])
    (cond,) = [c for c in ctx.conditions if c.type == "CarbonIntensityAvailable"]
    assert (cond.status, cond.reason) == ("False", "SourceFailed")
    assert (
        cond.message
        == "1 region(s), 30s old; last fetch failed: http://carbon: no answer within 5s"
    )
    assert ctx.gates() == []  # us-west-2's last good reading is clean


def test_unknown_preferred_regions_are_named() -> None:
    nodes = {"n": NodeFacts({"topology.kubernetes.io/region": "us-west-1"})}
    ctx = run_policies(_ctx(GREEN, nodes=nodes), [carbon_policy])
    (cond,) = [c for c in ctx.conditions if c.type == "PreferredRegionsKnown"]
    assert "unknown region 'us-west-2' — did you mean 'us-west-1'?" in cond.message


CACHED = {
    "model": "meta-llama/Llama-3.1-8B",
    "scheduling": {
        "cacheAware": {
            "enabled": True,
            "cacheHitWeight": 0.3,
            "preloadStrategy": {
                "nodes": {"labelSelector": {"matchLabels": {"node-pool": "gpu-primary"}}},
                "minCachedReplicas": 2,
            },
        }
    },
}


@pytest.mark.parametrize(("cached", "status"), [(1, "False"), (2, "True")])
def test_min_cached_replicas_counts_selected_nodes_holding_the_model(
    cached: int, status: str
) -> None:
    primary = {"node-pool": "gpu-primary"}
    model = frozenset({"meta-llama/llama-3.1-8b"})
    nodes = {f"p{i}": NodeFacts(primary, 8, model if i < cached else frozenset()) for i in range(3)}
    nodes["other"] = NodeFacts({"node-pool": "spare"}, 8, model)  # not selected
    ctx = run_policies(_ctx(CACHED, nodes=nodes), [cache_policy])
    assert ctx.status["cache"]["cachedNodes"] == cached
    (cond,) = ctx.conditions
    assert (cond.type, cond.status) == ("ModelCached", status)
    assert f"{cached} of 3 selected node(s) hold" in cond.message


def test_pools_without_the_blocks_are_left_alone() -> None:
    ctx = run_policies(_ctx({"model": "m"}), GUIDE_POLICIES)
    assert (ctx.status, ctx.conditions, ctx.events, ctx.spot_slots) == ({}, [], [], None)


OVER_BUDGET_SPOT = {
    **COST,
    "gpuRequirements": {"count": 8, "type": "A100"},
    "scheduling": {
        "costOptimization": {
            **COST["scheduling"]["costOptimization"],  # type: ignore[index]
            "spotEnabled": True,
            "spotStrategy": {"maxSpotPercent": 50},
        }
    },
}
A100_SPOT = {**SPOT, "neuronetes.io/gpu-type": "A100"}


@pytest.mark.parametrize(
    ("spot_node", "action"),
    [
        (NodeFacts(A100_SPOT, 8, free={"nvidia.com/gpu": 8}), "use-spot"),
        # spot nodes the pool's pods cannot use are no reason to wait for spot
        (NodeFacts({**SPOT, "neuronetes.io/gpu-type": "T4"}, 8), "fallback-model"),
        (NodeFacts(A100_SPOT, 8, free={"nvidia.com/gpu": 4}), "fallback-model"),
        (NodeFacts(A100_SPOT, 4), "fallback-model"),
        (
            NodeFacts(A100_SPOT, 8, taints=(Taint("gpu", "reserved", "NoSchedule"),)),
            "fallback-model",
        ),
    ],
    ids=["hosts", "other-gpu-type", "gpus-taken", "too-few-gpus", "untolerated-taint"],
)
def test_over_budget_a_spot_node_counts_only_if_it_can_host_the_pools_pods(
    spot_node: NodeFacts, action: str
) -> None:
    on_demand_a100 = {
        "node.kubernetes.io/instance-type": "big.gpu",
        "neuronetes.io/gpu-type": "A100",
    }
    nodes = {
        "n1": NodeFacts(on_demand_a100, 8),
        "n2": NodeFacts(on_demand_a100, 8),
        "s1": spot_node,
    }
    pods = (_pod("a", "n1"), _pod("b", "n2"))
    ctx = run_policies(_ctx(OVER_BUDGET_SPOT, pods=pods, nodes=nodes), [spot_policy, cost_policy])
    assert ctx.status["cost"]["action"] == action
    model = ctx.template["metadata"]["annotations"]["neuronetes.io/model"]
    assert model == ("big-model" if action == "use-spot" else "smaller-model")


def test_a_tolerated_taint_and_a_matching_selector_let_a_spot_node_host() -> None:
    spec = {
        **OVER_BUDGET_SPOT,
        "template": {
            "spec": {
                "containers": [{"name": "server", "image": "vllm"}],
                "nodeSelector": {"pool": "gpu"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            }
        },
    }
    tainted = (Taint("gpu", "reserved", "NoSchedule"),)
    on_demand_a100 = {
        "node.kubernetes.io/instance-type": "big.gpu",
        "neuronetes.io/gpu-type": "A100",
    }
    pods = (_pod("a", "n1"), _pod("b", "n2"))
    for labels, action in (({}, "fallback-model"), ({"pool": "gpu"}, "use-spot")):
        nodes = {
            "n1": NodeFacts(on_demand_a100, 8),
            "n2": NodeFacts(on_demand_a100, 8),
            "s1": NodeFacts({**A100_SPOT, **labels}, 8, taints=tainted),
        }
        ctx = run_policies(_ctx(spec, pods=pods, nodes=nodes), [spot_policy, cost_policy])
        assert ctx.status["cost"]["action"] == action
