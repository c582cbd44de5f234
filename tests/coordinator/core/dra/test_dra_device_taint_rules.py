"""DeviceTaintRules (KEP-5055, ``resource.k8s.io/v1beta2``) as kube-scheduler's allocator reads
them: a rule's taint lands on every device its selector matches (driver, pool and device, each
when set; no selector: no device); NoSchedule and NoExecute keep the device from a claim that
does not tolerate them, None keeps nothing away; the refusal names the rule; a rule the API would
not serve (an unknown effect, no key) is left out naming the field and the value and taints
nothing; deleting a rule gives the devices back."""

from __future__ import annotations

from typing import Any

from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.inventory.dra import DraChange, DraStore
from devcluster.dra import DRIVER
from tests.coordinator.core.dra.dra_objects import (
    claim,
    claim_pod,
    device_class,
    exactly,
    gpu_slice,
)
from tests.support.sched_hw import dgx1, gpu_node


def rule(
    name: str, selector: dict[str, str] | None, effect: str = "NoSchedule", key: str = "maint"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"taint": {"key": key, "value": "gpu-swap", "effect": effect}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


def store(*rules: dict[str, Any], claims: tuple[dict[str, Any], ...] = ()) -> DraStore:
    s = DraStore()
    for node in ("d", "e"):
        s.apply("ResourceSlice", node, gpu_slice(node, dgx1(node)))
    s.apply("DeviceClass", "gpu", device_class())
    for c in claims:
        s.apply("ResourceClaim", f"default/{c['metadata']['name']}", c)
    for r in rules:
        s.apply("DeviceTaintRule", r["metadata"]["name"], r)
    return s


def run(s: DraStore, count: int, node: str = "d", **request: Any) -> Decision | Failure:
    c = claim("c", [exactly("gpus", count, **request)])
    s.apply("ResourceClaim", "default/c", c)
    snapshot = Snapshot([gpu_node(node, dgx1(node), gpus=0)], dra=s.state())
    result = schedule_one(claim_pod("p", "c"), snapshot, build_framework())
    assert isinstance(result, Decision | Failure), result
    return result


def devices(result: Decision | Failure) -> set[str]:
    assert isinstance(result, Decision), result.message
    return {r.device.device for c in result.claims for r in c.results}


def test_a_rule_naming_one_device_keeps_it_from_claims_and_the_refusal_names_the_rule() -> None:
    s = store(rule("swap-gpu3", {"driver": DRIVER, "pool": "d", "device": "gpu-3"}))
    assert "gpu-3" not in devices(run(s, 7))
    refused = run(s, 8)
    assert isinstance(refused, Failure)
    assert "1 tainted and not tolerated" in refused.message, refused.message
    assert "gpu-3: maint=gpu-swap:NoSchedule from DeviceTaintRule swap-gpu3" in refused.message


def test_a_pool_wide_rule_taints_that_node_only_and_noexecute_blocks_too() -> None:
    s = store(rule("drain-d", {"pool": "d"}, effect="NoExecute"))
    refused = run(s, 1)
    assert isinstance(refused, Failure)
    assert "8 tainted and not tolerated" in refused.message, refused.message
    assert "from DeviceTaintRule drain-d" in refused.message
    assert len(devices(run(s, 8, node="e"))) == 8  # the other node's pool is untouched


def test_a_request_tolerating_the_rules_taint_gets_the_device() -> None:
    s = store(rule("drain-d", {"pool": "d"}, effect="NoExecute"))
    tolerant = {"key": "maint", "operator": "Exists", "effect": "NoExecute"}
    assert len(devices(run(s, 8, tolerations=[tolerant]))) == 8
    wrong_effect = {"key": "maint", "operator": "Exists", "effect": "NoSchedule"}
    assert isinstance(run(s, 1, tolerations=[wrong_effect]), Failure)


def test_no_selector_matches_nothing_and_an_effect_of_none_keeps_nothing_away() -> None:
    s = store(
        rule("no-selector", None),
        rule("informational", {"driver": DRIVER}, effect="None"),
        rule("other-driver", {"driver": "example.com"}),
    )
    assert len(devices(run(s, 8))) == 8


def test_a_rule_the_api_would_not_serve_is_left_out_naming_the_value_and_harms_nothing() -> None:
    s = store(
        rule("odd", {"pool": "d"}, effect="Sometimes"),
        rule("keyless", {"pool": "d"}, key=""),
        rule("swap-gpu3", {"pool": "d", "device": "gpu-3"}),
    )
    odd = s.errors[("DeviceTaintRule", "odd")]
    assert odd.message == (
        "spec.taint.effect: 'Sometimes' is not one of NoSchedule, NoExecute, None"
    ), odd.message
    assert s.errors[("DeviceTaintRule", "keyless")].message == "spec.taint.key: must be set"
    assert s.rejected_now()["DeviceTaintRule"] == 2
    assert devices(run(s, 7)) == {f"gpu-{i}" for i in range(8) if i != 3}  # only the good rule


def test_deleting_a_rule_gives_its_devices_back() -> None:
    s = store(rule("drain-d", {"pool": "d"}))
    assert isinstance(run(s, 8), Failure)
    changes: list[DraChange] = []
    s.subscribe(changes.append)
    s.apply("DeviceTaintRule", "drain-d", None)
    assert [c.frees for c in changes] == [True]  # refused pods are tried again
    assert len(devices(run(s, 8))) == 8
    added = DraChange("DeviceTaintRule", "new", rule("new", {}), None)
    assert not added.frees  # a new rule frees nothing
