"""An AgentPool's spec read and checked, and the pods made from it (pure)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from common import podkeys
from coordinator.neuronetes.decide.hooks import CLEAN_ENERGY_GATE, PolicyContext, run_policies
from coordinator.neuronetes.decide.podtemplate import (
    pod_for,
    pool_label,
    pool_template,
    priority_class_for,
    template_hash,
)
from coordinator.neuronetes.decide.pool import PoolProblem, PoolSpec, parse_pool
from coordinator.neuronetes.decide.replicas import OwnedPod, plan_replicas

#: The AgentPool profile the controller names (the coordinator passes it in).
POOLS = podkeys.AGENT_POOL_SCHEDULER_NAME


def _pool(spec: dict[str, Any], name: str = "p") -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "uid": "u-1"}
    return {
        "apiVersion": "neuronetes.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": meta,
        "spec": spec,
    }


def _made(spec: dict[str, Any]) -> tuple[PoolSpec, dict[str, Any]]:
    pool = parse_pool(_pool(spec), {"A100"})
    return pool, pod_for(pool, pool_template(pool, scheduler_name=POOLS))


def test_tensor_parallel_pool_asks_for_eight_nvlinked_a100s() -> None:
    spec = {
        "gpuRequirements": {
            "count": 8,
            "type": "A100",
            "topology": {"locality": "same-node", "minBandwidth": "600Gi"},
        }
    }
    _, pod = _made(spec)
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    assert pod["metadata"]["annotations"]["topos.io/gpu-locality"] == "nvlink"
    assert pod["spec"]["schedulerName"] == "topos-agentpools"  # the AgentPool profile
    assert pod["metadata"]["labels"]["neuronetes.io/pool"] == "p"
    assert pod["metadata"]["generateName"] == "p-"
    (ref,) = pod["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["controller"]) == ("AgentPool", "u-1", True)


@pytest.mark.parametrize(("bandwidth", "locality"), [("32Gi", "same-node"), (100, "nvlink")])
def test_min_bandwidth_asks_for_nvlink_only_above_pcie(bandwidth: object, locality: str) -> None:
    topology = {"locality": "same-node", "minBandwidth": bandwidth}
    _, pod = _made({"gpuRequirements": {"count": 2, "topology": topology}})
    assert pod["metadata"]["annotations"]["topos.io/gpu-locality"] == locality


def test_mig_pool_asks_for_the_instance_not_a_gpu() -> None:
    _, pod = _made({"migProfile": "1g.5gb", "gpuRequirements": {"count": 1, "type": "A100"}})
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/mig-1g.5gb": "1"}}


def test_gang_priority_model_and_scheduling_annotation() -> None:
    spec = {
        "model": "llama-3-70b",
        "minReplicas": 4,
        "gpuRequirements": {"count": 2, "memory": "40Gi"},
        "scheduling": {
            "priority": 1000,
            "preemption": {"enabled": False},
            "gangScheduling": {"enabled": True, "minMembers": 4},
        },
    }
    pool, pod = _made(spec)
    meta = pod["metadata"]
    assert meta["labels"]["topos.io/gang"] == "p"
    assert meta["labels"]["topos.io/gang-min"] == "4"
    assert meta["annotations"]["neuronetes.io/model"] == "llama-3-70b"
    assert meta["annotations"]["topos.io/gpu-memory-min"] == "40Gi"
    assert json.loads(meta["annotations"]["neuronetes.io/scheduling"]) == spec["scheduling"]
    assert pod["spec"]["priorityClassName"] == "neuronetes-ns-p"
    assert pod["spec"]["containers"][0]["args"] == ["--model", "llama-3-70b"]
    assert pool.base_replicas() == 4


def test_data_locality_becomes_preferred_pod_affinity() -> None:
    locality = {
        "vectorStoreAffinity": ["weaviate-shard-0"],
        "localityWeight": "high",
        "antiAffinity": ["training-jobs"],
    }
    _, pod = _made({"scheduling": {"dataLocality": locality}})
    affinity = pod["spec"]["affinity"]
    near = affinity["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert {t["weight"] for t in near} == {100}
    keys = {t["podAffinityTerm"]["labelSelector"]["matchExpressions"][0]["key"] for t in near}
    assert keys == {"neuronetes.io/vector-store", "statefulset.kubernetes.io/pod-name"}
    (away,) = affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    expr = away["podAffinityTerm"]["labelSelector"]["matchExpressions"][0]
    assert (expr["key"], expr["values"]) == ("neuronetes.io/workload-class", ["training-jobs"])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"migProfile": "1g.5gb", "gpuRequirements": {"count": 0}},
            "spec.gpuRequirements.count is 0 but spec.migProfile asks for '1g.5gb'",
        ),
        ({"gpuRequirements": {"type": "A1000"}}, "unknown GPU type 'A1000'"),
        ({"gpuRequirements": {"count": -1}}, "spec.gpuRequirements.count: -1 is negative"),
        ({"replicas": -3}, "spec.replicas: -3 is negative"),
        ({"minReplicas": 3, "maxReplicas": 2}, "spec.maxReplicas (2) is below spec.minReplicas"),
        ({"migProfile": "9g.99gb"}, "unknown MIG profile '9g.99gb'"),
        ({"template": {"spec": {"containers": []}}}, "at least one container"),
    ],
)
def test_bad_pools_are_refused_with_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PoolProblem, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_pool(_pool(spec), {"A100"})


def test_a_gpu_type_on_some_node_is_known() -> None:
    assert parse_pool(_pool({"gpuRequirements": {"type": "MI300X"}}), {"MI300X"}).gpu.count == 1


def _pod(name: str, created: float, node: str | None = None, **kw: Any) -> OwnedPod:
    fields: dict[str, Any] = {
        "uid": name,
        "created": created,
        "node": node,
        "phase": "Running" if node else "Pending",
        "deleting": False,
        "ready": bool(node),
        "template_hash": "h",
    }
    fields.update(kw)
    return OwnedPod(name=name, **fields)


def test_scale_down_removes_pending_then_newest() -> None:
    pods = [
        _pod("a", 1.000001, "n1"),
        _pod("b", 1.000003, "n1"),
        _pod("c", 1.000002),
        _pod("d", 1.0, "n2"),
    ]
    plan = plan_replicas(2, pods, "h")
    assert [p.name for p in plan.delete] == ["c", "b"]
    assert plan.create == 0


def test_finished_and_outdated_pods_are_replaced() -> None:
    pods = [
        _pod("done", 1.0, "n1", phase="Succeeded"),
        _pod("old", 2.0, "n1", template_hash="other"),
        _pod("ok", 3.0, "n1"),
        _pod("going", 4.0, "n1", deleting=True),
    ]
    plan = plan_replicas(3, pods, "h")
    assert sorted(p.name for p in plan.delete) == ["done", "old"]
    assert plan.create == 2


def test_policies_edit_the_template_and_gates_are_lifted_in_place() -> None:
    pool = parse_pool(_pool({"model": "big", "scheduling": {"costOptimization": {}}}))

    def fallback(ctx: PolicyContext) -> None:
        ctx.template["metadata"]["annotations"]["neuronetes.io/model"] = "small"
        ctx.set_gate(CLEAN_ENERGY_GATE, held=False)
        ctx.status["model"] = "small"

    def broken(ctx: PolicyContext) -> None:
        raise RuntimeError("no price table")

    template = pool_template(pool, scheduler_name=POOLS)
    template["spec"]["schedulingGates"] = [{"name": CLEAN_ENERGY_GATE}]
    held_hash = template_hash(template)
    ctx = run_policies(
        PolicyContext(pool=pool, raw={}, template=template, now=0.0), [fallback, broken]
    )
    assert ctx.template["metadata"]["annotations"]["neuronetes.io/model"] == "small"
    assert ctx.gates() == []
    assert ctx.status == {"model": "small"}
    (failed,) = ctx.conditions
    assert (failed.type, failed.message) == ("PolicyFailed", "broken: no price table")
    # The model changed: a new template (pods replaced). Gates alone do not change the hash.
    assert template_hash(ctx.template) != held_hash
    gated = _pod(
        "g", "t", None, gates=(CLEAN_ENERGY_GATE,), template_hash=template_hash(ctx.template)
    )
    plan = plan_replicas(1, [gated], template_hash(ctx.template), ctx.gates())
    assert plan.ungate == [(gated, ())]
    assert plan.create == 0


def test_policy_helpers_switch_the_model_and_add_node_affinity() -> None:
    pool = parse_pool(_pool({"model": "big", "gpuRequirements": {"type": "A100"}}), {"A100"})
    ctx = PolicyContext(
        pool=pool,
        raw={},
        template=pool_template(pool, scheduler_name=POOLS),
        now=0.0,
    )
    ctx.set_model("smaller-model")
    spot = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
    ctx.prefer_nodes(spot, 80)
    zone = {"key": "topology.kubernetes.io/region", "operator": "In", "values": ["us-west-2"]}
    ctx.prefer_nodes(zone, required=True)
    pod = pod_for(pool, ctx.template)
    assert pod["metadata"]["annotations"]["neuronetes.io/model"] == "smaller-model"
    assert pod["spec"]["containers"][0]["args"] == ["--model", "smaller-model"]
    node = pod["spec"]["affinity"]["nodeAffinity"]
    (preferred,) = node["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred == {"weight": 80, "preference": {"matchExpressions": [spot]}}
    (term,) = node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [e["key"] for e in term["matchExpressions"]] == [
        "neuronetes.io/gpu-type",
        "topology.kubernetes.io/region",
    ]


def test_the_pools_ready_condition_says_why_a_pod_is_not_placed() -> None:
    """``kubectl describe agentpool`` shows the scheduler's reason, not only a count."""
    from coordinator.neuronetes.decide.replicas import owned_pod
    from coordinator.neuronetes.kube.reconcile import _ready

    pool = parse_pool(_pool({"replicas": 2, "gpuRequirements": {"count": 8, "type": "A100"}}))
    reason = "0/8 nodes are available: 2 Insufficient nvidia.com/gpu."
    pending = owned_pod(
        {
            "metadata": {"name": "p-abc", "uid": "u1"},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": reason,
                    }
                ],
            },
        }
    )
    running = owned_pod(
        {
            "metadata": {"name": "p-def", "uid": "u2"},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    cond = _ready(pool, [pending, running], [])
    assert (cond.status, cond.reason) == ("False", "ReplicasNotReady")
    assert cond.message == f"1 of 2 replicas ready; 1 not scheduled: p-abc: {reason}"
    assert pending.unscheduled == reason
    assert running.unscheduled is None


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@pytest.mark.parametrize("length", [1, 63, 64, 80, 253])
def test_pool_label_is_a_valid_label_value_for_any_pool_name(length: int) -> None:
    name = ("agents-" * 40)[: length - 1] + "x"  # a DNS subdomain with '-' at the 52nd char
    value = pool_label(name)
    assert len(value) <= 63
    assert _LABEL_VALUE.match(value)
    assert value == name if length <= 63 else value != name
    # two long names sharing their first 52 characters still differ
    assert pool_label(name + "-a") != pool_label(name + "-b") or length + 2 <= 63


def test_a_long_pools_pods_and_priority_class_carry_valid_names() -> None:
    name = "a" * 60 + "-" + "b" * 150
    pool = parse_pool(
        _pool(
            {"scheduling": {"priority": 5, "gangScheduling": {"enabled": True, "minMembers": 2}}},
            name,
        )
    )
    pod = pod_for(pool, pool_template(pool, scheduler_name=POOLS))
    labels = pod["metadata"]["labels"]
    assert labels["neuronetes.io/pool"] == labels["topos.io/gang"] == pool_label(name)
    pc = priority_class_for(pool)
    assert len(pc["metadata"]["name"]) <= 253
    assert pc["metadata"]["labels"]["neuronetes.io/pool"] == pool_label(name)
    assert pod["spec"]["priorityClassName"] == pc["metadata"]["name"]
    other = parse_pool(
        _pool({"scheduling": {"priority": 5}}, "a" * 60 + "-" + "b" * 150 + "c"), {"A100"}
    )
    assert priority_class_for(other)["metadata"]["name"] != pc["metadata"]["name"]
