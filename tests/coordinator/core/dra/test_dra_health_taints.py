"""Unhealthy GPUs as DeviceTaintRules (docs/health.md): from the inventory's verdicts and the
rules there are, which rules Topos creates, updates and deletes. A GPU is joined to its DRA
device by the ``uuid`` the driver publishes (a MIG device by its ``parentUUID``); each rule
selects exactly one device; rules Topos does not own are never touched; the taint says why in
a word; rules Topos wrote are read back as the same rules (no churn)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from agent.devices import discover_profile
from common.labels import is_dns1123_subdomain
from common.model import Gpu, GpuHealth, NodeTopology
from coordinator.core.dra.healthtaints import (
    MANAGED_BY,
    OWNER,
    TAINT_KEY,
    UnhealthyGpu,
    plan,
    rule_name,
    rule_object,
    short_reason,
    wanted_taints,
)
from coordinator.core.dra.model import DeviceId
from coordinator.core.dra.state import DraState
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Failure
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.inventory.dra import DraStore
from devcluster.dra import DRIVER
from tests.coordinator.core.dra.dra_objects import (
    claim,
    claim_pod,
    device_class,
    exactly,
    gpu_slice,
)
from tests.support.dra import node_slice
from tests.support.sched_hw import dgx1, gpu_node


def state(*nodes: tuple[str, str]) -> tuple[DraState, dict[str, NodeTopology]]:
    """The DRA state of ``(node, profile)`` machines as NVIDIA's driver publishes them, and
    the topology each node's agent reports."""
    store = DraStore()
    topologies = {}
    for node, profile in nodes:
        store.apply("ResourceSlice", node, node_slice(node, profile))
        topologies[node] = discover_profile(profile, hostname=node)
    return store.state(), topologies


def sick(node: str, topology: NodeTopology, index: int, reason: str = "uncorrected-ecc") -> Any:
    return UnhealthyGpu(node, topology.gpus[index].uuid, reason)


def rule(
    name: str, pool: str, device: str, *, value: str = "x", owner: str | None = OWNER
) -> dict[str, Any]:
    labels = {MANAGED_BY: owner} if owner else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": pool, "device": device},
            "taint": {"key": TAINT_KEY, "value": value, "effect": "NoSchedule"},
        },
    }


def test_an_unhealthy_gpu_gets_one_rule_selecting_exactly_its_device() -> None:
    s, topo = state(("n1", "dgx-a100"), ("n2", "dgx-a100"))
    wanted = wanted_taints(s, [sick("n2", topo["n2"], 3)], "NoSchedule")
    device = DeviceId(DRIVER, "n2", "gpu-3")
    assert wanted == {device: Taint(TAINT_KEY, "uncorrected-ecc", "NoSchedule")}

    todo = plan(wanted, [])
    assert (todo.update, todo.delete) == ((), ())
    (made,) = todo.create
    assert made["metadata"] == {
        "name": "topos-gpu-unhealthy.n2.gpu-3",
        "labels": {"app.kubernetes.io/managed-by": "topos"},
    }
    assert made["spec"] == {
        "deviceSelector": {"driver": DRIVER, "pool": "n2", "device": "gpu-3"},
        "taint": {
            "key": "topos.io/gpu-unhealthy",
            "value": "uncorrected-ecc",
            "effect": "NoSchedule",
        },
    }
    assert made["apiVersion"] == "resource.k8s.io/v1beta2"


def test_the_gpus_of_another_node_and_gpus_without_a_device_are_left_alone() -> None:
    s, topo = state(("n1", "dgx-a100"))
    other = discover_profile("dgx-a100", hostname="n9")  # its node publishes no slice
    assert wanted_taints(s, [sick("n9", other, 0)], "NoSchedule") == {}
    # a UUID reported by n1's agent but claimed for a node whose slice is not n1's: no join
    assert wanted_taints(s, [sick("n9", topo["n1"], 0)], "NoSchedule") == {}
    assert wanted_taints(DraState(), [sick("n1", topo["n1"], 0)], "NoSchedule") == {}


def test_a_mig_gpu_taints_each_of_its_mig_devices() -> None:
    s, topo = state(("m", "dgx-a100-mig"))
    parent = next(g for g in topo["m"].gpus if g.mig_enabled)
    wanted = wanted_taints(s, [UnhealthyGpu("m", parent.uuid, "xid-79")], "NoExecute")
    assert wanted, "a MIG GPU's devices are its MIG devices"
    prefix = f"gpu-{parent.index}-mig-"
    assert all(d.device.startswith(prefix) for d in wanted), sorted(wanted)
    assert len(wanted) == len(parent.mig_instances)
    assert {t.effect for t in wanted.values()} == {"NoExecute"}


def test_a_healthy_gpu_again_deletes_its_rule_and_a_foreign_rule_is_never_touched() -> None:
    existing = [
        rule("topos-gpu-unhealthy.n2.gpu-3", "n2", "gpu-3"),
        rule("upkeep-n2", "n2", "gpu-3", owner=None),  # an operator's
        rule("driver-rule", "n2", "gpu-4", owner="nvidia-dra-driver"),  # another owner's
    ]
    todo = plan({}, existing)
    assert todo.delete == ("topos-gpu-unhealthy.n2.gpu-3",)
    assert (todo.create, todo.update) == ((), ())


def test_rules_topos_wrote_read_back_unchanged_and_a_new_reason_updates_in_place() -> None:
    device = DeviceId(DRIVER, "n2", "gpu-3")
    written = rule_object(device, Taint(TAINT_KEY, "uncorrected-ecc", "NoSchedule"))
    assert not plan({device: Taint(TAINT_KEY, "uncorrected-ecc", "NoSchedule")}, [written])

    todo = plan({device: Taint(TAINT_KEY, "xid-79", "NoSchedule")}, [written])
    (changed,) = todo.update
    assert changed["metadata"]["name"] == written["metadata"]["name"]
    assert changed["spec"]["taint"]["value"] == "xid-79"
    assert (todo.create, todo.delete) == ((), ())


def test_a_rule_of_ours_under_another_name_is_kept_and_stale_or_odd_ones_go() -> None:
    device = DeviceId(DRIVER, "n2", "gpu-3")
    wanted = {device: Taint(TAINT_KEY, "x", "NoSchedule")}
    odd = rule("topos-wide", "n2", "gpu-1")
    del odd["spec"]["deviceSelector"]["device"]  # selects a whole pool: not a rule we write
    broken = rule("topos-broken", "n2", "gpu-2")
    broken["spec"]["taint"]["effect"] = "Sometimes"
    existing = [
        rule("a-renamed", "n2", "gpu-3"),
        rule("b-twin", "n2", "gpu-3"),  # a second of ours for the same device
        odd,
        broken,
    ]
    todo = plan(wanted, existing)
    assert (todo.create, todo.update) == ((), ())
    assert sorted(todo.delete) == ["b-twin", "topos-broken", "topos-wide"]


def test_the_taint_says_why_in_a_word() -> None:
    def gpu(reason: str | None = None, *reasons: str) -> Gpu:
        health = GpuHealth(status="unhealthy", reasons=reasons) if reasons else None
        return Gpu(index=0, uuid="GPU-0", healthy=False, health_reason=reason, health=health)

    assert short_reason(gpu("XID 79")) == "xid-79"
    assert short_reason(gpu("GPU is lost (NVML: GPU_IS_LOST); reset or reboot needed")) == (
        "gpu-lost"
    )
    assert short_reason(gpu("2 uncorrected ECC errors since the driver loaded")) == (
        "uncorrected-ecc"
    )
    assert short_reason(gpu(None, "row remapping failed (the GPU needs service)")) == (
        "row-remap-failed"
    )
    assert short_reason(gpu("NVML gives no handle for GPU 3: Unknown")) == "no-nvml-handle"
    assert short_reason(gpu()) == "unhealthy"


@pytest.mark.parametrize(
    ("pool", "device"),
    [("a/b.example.com", "gpu-0"), ("n" * 250, "gpu-0"), ("Upper", "gpu-0")],
)
def test_a_pool_that_is_no_object_name_gets_a_hashed_name(pool: str, device: str) -> None:
    name = rule_name(DeviceId(DRIVER, pool, device))
    assert name.startswith("topos-gpu-unhealthy.")
    assert is_dns1123_subdomain(name), name
    assert name != rule_name(DeviceId(DRIVER, pool, "gpu-1"))
    assert rule_name(DeviceId("other.example.com", "n2", "gpu-3")) != rule_name(
        DeviceId(DRIVER, "n2", "gpu-3")
    )


def test_a_claim_refused_for_want_of_the_unhealthy_gpu_names_topos_rule() -> None:
    """The device of a GPU Topos holds unhealthy is not free anyway; its rule says why."""
    sick_topology = dgx1("d")
    gpus = list(sick_topology.gpus)
    gpus[3] = msgspec.structs.replace(gpus[3], healthy=False, health_reason="XID 79")
    sick_topology = msgspec.structs.replace(sick_topology, gpus=tuple(gpus))
    store = DraStore()
    store.apply("ResourceSlice", "d", gpu_slice("d", dgx1("d")))
    store.apply("DeviceClass", "gpu", device_class())
    wanted = wanted_taints(
        store.state(), [UnhealthyGpu("d", gpus[3].uuid, short_reason(gpus[3]))], "NoSchedule"
    )
    (made,) = plan(wanted, []).create
    store.apply("DeviceTaintRule", made["metadata"]["name"], made)
    store.apply("ResourceClaim", "default/c", claim("c", [exactly("gpus", 8)]))
    snapshot = Snapshot([gpu_node("d", sick_topology, gpus=0)], dra=store.state())
    result = schedule_one(claim_pod("p", "c"), snapshot, build_framework())
    assert isinstance(result, Failure), result
    assert (
        "gpu-3: topos.io/gpu-unhealthy=xid-79:NoSchedule from DeviceTaintRule "
        "topos-gpu-unhealthy.d.gpu-3"
    ) in result.message, result.message
