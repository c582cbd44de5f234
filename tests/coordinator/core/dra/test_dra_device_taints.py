"""Device taints written by others (KEP-5055: NVIDIA's DRA driver on a fabric error, an operator
draining a GPU) in ResourceSlices: a NoSchedule or NoExecute taint keeps its device from a claim
that does not tolerate it, and the refusal names the taint; a taint whose key no one here knows
is matched like any other; an effect other than NoSchedule/NoExecute keeps nothing away."""

from __future__ import annotations

from typing import Any

import msgspec

from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from tests.coordinator.core.dra.dra_objects import claim, claim_pod, exactly, gpu_slice, state
from tests.support.sched_hw import dgx1, gpu_node

FABRIC = {"key": "nvidia.com/fabric-error", "value": "degraded", "effect": "NoSchedule"}


def _snapshot(taints: dict[int, list[dict[str, str]]], *claims: dict[str, Any]) -> Snapshot:
    topo = dgx1("d")
    s = gpu_slice("d", topo)
    for i, dev in enumerate(s["spec"]["devices"]):
        if i in taints:
            dev["taints"] = taints[i]
    return Snapshot([gpu_node("d", topo, gpus=0)], dra=state([s], claims=list(claims)))


def _devices(result: object) -> set[str]:
    assert isinstance(result, Decision), getattr(result, "message", result)
    return {r.device.device for c in result.claims for r in c.results}


def test_a_tainted_device_is_passed_over_and_the_refusal_names_the_taint() -> None:
    every = {i: [FABRIC] for i in range(8)}
    snapshot = _snapshot(every, claim("c", [exactly("gpus", 1)]))
    result = schedule_one(claim_pod("p", "c"), snapshot, build_framework())
    assert isinstance(result, Failure)
    assert "8 tainted and not tolerated" in result.message, result.message
    assert "nvidia.com/fabric-error=degraded:NoSchedule" in result.message, result.message


def test_seven_of_eight_tainted_leaves_the_clean_one() -> None:
    seven = {i: [FABRIC] for i in range(8) if i != 5}
    snapshot = _snapshot(seven, claim("c", [exactly("gpus", 1)]))
    got = _devices(schedule_one(claim_pod("p", "c"), snapshot, build_framework()))
    assert got == {"gpu-5"}


def test_a_claim_tolerating_the_taint_gets_the_device() -> None:
    every = {i: [FABRIC] for i in range(8)}
    tolerant = claim(
        "c",
        [
            exactly(
                "gpus", 2, tolerations=[{"key": "nvidia.com/fabric-error", "operator": "Exists"}]
            )
        ],
    )
    got = _devices(schedule_one(claim_pod("p", "c"), _snapshot(every, tolerant), build_framework()))
    assert len(got) == 2


def test_an_unknown_key_blocks_like_any_and_an_unknown_effect_blocks_nothing() -> None:
    odd_key = {"key": "example.com/never-heard-of", "effect": "NoExecute"}
    informational = {"key": "nvidia.com/fabric-error", "effect": "None"}
    taints = {i: [odd_key] for i in range(4)} | {i: [informational] for i in range(4, 8)}
    snapshot = _snapshot(taints, claim("c", [exactly("gpus", 4)]))
    got = _devices(schedule_one(claim_pod("p", "c"), snapshot, build_framework()))
    assert got == {f"gpu-{i}" for i in range(4, 8)}
    snapshot = _snapshot(taints, claim("c", [exactly("gpus", 5)]))
    result = schedule_one(claim_pod("p", "c"), snapshot, build_framework())
    assert isinstance(result, Failure)
    assert "example.com/never-heard-of:NoExecute" in result.message, result.message


def test_a_gpu_the_agent_reports_unhealthy_is_not_allocated_to_a_claim() -> None:
    topo = dgx1("d")
    sick = msgspec.structs.replace(topo.gpus[5], healthy=False, health_reason="XID 79")
    topo = msgspec.structs.replace(topo, gpus=(*topo.gpus[:5], sick, *topo.gpus[6:]))
    s = gpu_slice("d", topo)

    def snapshot(count: int) -> Snapshot:
        c = claim("c", [exactly("gpus", count)])
        return Snapshot([gpu_node("d", topo, gpus=0)], dra=state([s], claims=[c]))

    got = _devices(schedule_one(claim_pod("p", "c"), snapshot(7), build_framework()))
    assert "gpu-5" not in got
    assert isinstance(schedule_one(claim_pod("p", "c"), snapshot(8), build_framework()), Failure)
