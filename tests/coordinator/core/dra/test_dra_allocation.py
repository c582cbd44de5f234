"""Pods with ResourceClaims (and unchanged ``nvidia.com/gpu`` pods served by DRA, KEP-5004)
through a whole scheduling cycle: which devices each claim gets, that GPUs are chosen by NVLink
topology like ``nvidia.com/gpu`` pods, that no device is handed out twice, and what a pod is
told when its claims cannot be allocated."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.dra.state import DraObjectError, DraState
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure, ScheduleResult
from coordinator.core.plugins.dynamicresources import DynamicResources
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.dra import DRIVER, resource_slice
from devcluster.pods import pod
from tests.coordinator.core.dra.dra_objects import (
    claim,
    claim_pod,
    device_class,
    exactly,
    gpu_slice,
    state,
)
from tests.support.dra import allocated_on
from tests.support.sched_hw import dgx1, gpu_node, pcie8, plain_node, request

QUADS = ({0, 1, 2, 3}, {4, 5, 6, 7})


def dra_node(name: str, topo: Any = None, **kw: Any) -> NodeInfo:
    """A GPU node whose GPUs are published by the DRA driver (no nvidia.com/gpu allocatable)."""
    return gpu_node(name, topo if topo is not None else dgx1(name), gpus=0, **kw)


def schedule(obj: Mapping[str, Any], snapshot: Snapshot) -> ScheduleResult:
    return schedule_one(obj, snapshot, build_framework())


def decided(result: ScheduleResult) -> Decision:
    assert isinstance(result, Decision), getattr(result, "message", result)
    return result


def devices(allocation: ClaimAllocation) -> list[str]:
    return [r.device.device for r in allocation.results]


def place(objs: Sequence[Mapping[str, Any]], snapshot: Snapshot) -> list[ScheduleResult]:
    """Schedule one after another, assuming each decision with its claims (as the engine does)."""
    out = []
    for obj in objs:
        result = schedule(obj, snapshot)
        if isinstance(result, Decision):
            snapshot.assume(request(obj), result.node, result.placement, result.claims)
        out.append(result)
    return out


def one_node(*claims: Mapping[str, Any], classes: Sequence[Any] = (device_class(),)) -> Snapshot:
    topo = dgx1("d")
    return Snapshot([dra_node("d", topo)], dra=state([gpu_slice("d", topo)], classes, claims))


# --- topology ------------------------------------------------------------------------------


def test_four_gpu_claim_on_a_dgx1_gets_an_nvlink_quad() -> None:
    snapshot = one_node(claim("train-gpus", [exactly("gpus", 4)]))
    d = decided(schedule(claim_pod("p", "train-gpus"), snapshot))
    assert set(d.placement.gpus) in QUADS
    (alloc,) = d.claims
    assert alloc.name == "train-gpus"
    assert alloc.uid == "uid-train-gpus"
    assert alloc.resource_version == "1"
    assert alloc.node == "d"
    assert {int(n.split("-")[1]) for n in devices(alloc)} == set(d.placement.gpus)
    assert all(r.request == "gpus" and r.device.driver == DRIVER for r in alloc.results)
    # the annotation names the same GPUs the claim holds
    assert d.device_ids == tuple(f"GPU-d-{i}" for i in d.placement.gpus)


def test_with_one_gpu_taken_a_four_gpu_claim_gets_the_intact_quad_not_the_first_four() -> None:
    taken = claim("other", [exactly("gpus", 1)], allocation=allocated_on("d", ["gpu-0"]))
    snapshot = one_node(taken, claim("c", [exactly("gpus", 4)]))
    d = decided(schedule(claim_pod("p", "c"), snapshot))
    assert devices(d.claims[0]) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]  # first fit: gpu-1..4


def test_a_two_gpu_claim_gets_a_double_nvlink_pair() -> None:
    d = decided(schedule(claim_pod("p", "c"), one_node(claim("c", [exactly("gpus", 2)]))))
    topo = dgx1("d")
    assert str(topo.link(*d.placement.gpus)) == "NV2"  # first fit (gpu-0, gpu-1) is NV1


def test_two_four_gpu_claims_take_both_quads_and_a_third_finds_nothing() -> None:
    snapshot = one_node(*(claim(f"c{i}", [exactly("gpus", 4)]) for i in range(3)))
    results = place([claim_pod(f"p{i}", f"c{i}") for i in range(3)], snapshot)
    a, b = decided(results[0]), decided(results[1])
    assert {frozenset(a.placement.gpus), frozenset(b.placement.gpus)} == {
        frozenset(q) for q in QUADS
    }
    assert isinstance(results[2], Failure)
    assert "cannot allocate claim c2" in results[2].message


def test_one_gpu_claims_fill_a_quad_before_breaking_the_other() -> None:
    snapshot = one_node(*(claim(f"c{i}", [exactly("gpus", 1)]) for i in range(4)))
    results = place([claim_pod(f"p{i}", f"c{i}") for i in range(4)], snapshot)
    used = {g for r in results for g in decided(r).placement.gpus}
    assert used in QUADS


def test_dra_gpus_and_classic_gpu_pods_never_share_a_gpu() -> None:
    topo = dgx1("d")
    node = gpu_node("d", topo)  # the device plugin also advertises nvidia.com/gpu: 8
    snapshot = Snapshot(
        [node],
        dra=state([gpu_slice("d", topo)], claims=[claim("c", [exactly("gpus", 4)])]),
    )
    first = place([pod("classic", gpus=4)], snapshot)
    dra = place([claim_pod("p", "c")], snapshot)
    classic = set(decided(first[0]).placement.gpus)
    claimed = set(decided(dra[0]).placement.gpus)
    assert not classic & claimed
    assert claimed in QUADS
    # …and the other way round: GPUs another scheduler allocated to a claim are not free
    held = state(
        [gpu_slice("d", topo)],
        claims=[
            claim(
                "theirs",
                [exactly("gpus", 4)],
                allocation=allocated_on("d", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]),
            )
        ],
    )
    snapshot = Snapshot([gpu_node("d", topo)], dra=held)
    got = decided(schedule(pod("classic", gpus=4), snapshot))
    assert set(got.placement.gpus) == QUADS[1]
    assert isinstance(schedule(pod("more", gpus=5), snapshot), Failure)


def test_nvlink_locality_is_honoured_for_claims() -> None:
    topo = pcie8("p")
    snapshot = Snapshot(
        [dra_node("p", topo)],
        dra=state([gpu_slice("p", topo)], claims=[claim("c", [exactly("gpus", 2)])]),
    )
    obj = claim_pod("x", "c", annotations={"topos.io/gpu-locality": "nvlink"})
    result = schedule(obj, snapshot)
    assert isinstance(result, Failure)
    assert "cannot allocate claim c" in result.message
    assert "NVLink" in result.message


def test_node_without_agent_topology_takes_devices_first_fit() -> None:
    topo = dgx1("bare")
    snapshot = Snapshot(
        [plain_node("bare")],
        dra=state([gpu_slice("bare", topo)], claims=[claim("c", [exactly("gpus", 2)])]),
    )
    d = decided(schedule(claim_pod("p", "c"), snapshot))
    assert devices(d.claims[0]) == ["gpu-0", "gpu-1"]
    assert d.placement.gpus == ()  # no agent: no GPU indices to promise


def test_first_fit_nodes_give_the_chosen_node_every_claim_of_the_pod() -> None:
    """On nodes whose devices are taken in slice order, the filter only checks that a pod's
    claims fit; the chosen node's allocations are the whole answer: a shared claim allocated
    there already reserved only, each new claim its own devices, and the devices a filled node
    lacks never offered."""
    topo_a, topo_b = dgx1("a"), dgx1("b")
    shared = claim("shared", [exactly("gpus", 1)], allocation=allocated_on("b", ["gpu-0"]))
    snapshot = Snapshot(
        [plain_node("a"), plain_node("b")],
        dra=state(
            [gpu_slice("a", topo_a), gpu_slice("b", topo_b)],
            claims=[shared, claim("x", [exactly("gpus", 2)]), claim("y", [exactly("gpus", 3)])],
        ),
    )
    d = decided(schedule(claim_pod("p", "shared", "x", "y"), snapshot))
    assert d.node == "b"
    by_name = {c.name: c for c in d.claims}
    assert by_name["shared"].reserve_only
    assert devices(by_name["x"]) == ["gpu-1", "gpu-2"]
    assert devices(by_name["y"]) == ["gpu-3", "gpu-4", "gpu-5"]
    assert not by_name["x"].reserve_only
    assert by_name["x"].node == "b"
    big = claim("big", [exactly("gpus", 8)])  # with the shared one: 9 of 8
    full = Snapshot(
        [plain_node("b")],
        dra=state([gpu_slice("b", topo_b)], claims=[shared, big]),
    )
    result = schedule(claim_pod("q", "shared", "big"), full)
    assert isinstance(result, Failure)
    assert "cannot allocate claim big" in result.message


# --- claims and requests -------------------------------------------------------------------


def test_a_claim_shared_by_two_pods_is_allocated_once() -> None:
    snapshot = one_node(claim("shared", [exactly("gpus", 2)]))
    first, second = place([claim_pod("a", "shared"), claim_pod("b", "shared")], snapshot)
    a, b = decided(first), decided(second)
    assert devices(a.claims[0]) == devices(b.claims[0])
    assert not a.claims[0].reserve_only
    assert b.claims[0].reserve_only  # allocated once, by the first pod
    assert a.placement.gpus == b.placement.gpus  # both pods see the claim's GPUs


def test_a_claim_allocated_elsewhere_rejects_every_other_node() -> None:
    topo_a, topo_b = dgx1("a"), dgx1("b")
    snapshot = Snapshot(
        [dra_node("a", topo_a), dra_node("b", topo_b)],
        dra=state(
            [gpu_slice("a", topo_a), gpu_slice("b", topo_b)],
            claims=[claim("c", [exactly("gpus", 1)], allocation=allocated_on("b", ["gpu-6"]))],
        ),
    )
    d = decided(schedule(claim_pod("p", "c"), snapshot))
    assert d.node == "b"
    assert devices(d.claims[0]) == ["gpu-6"]  # only reserved: the existing results
    assert d.placement.gpus == (6,)
    assert "claim c is allocated on node b" in d.verdicts["a"].status.message


def test_missing_class_and_missing_claim_and_uncreated_template_are_told() -> None:
    snapshot = one_node(claim("c", [exactly("gpus", 1, cls="nope")]))
    result = schedule(claim_pod("p", "c"), snapshot)
    assert isinstance(result, Failure)
    assert "device class nope not found" in result.message
    assert result.unresolvable
    result = schedule(claim_pod("q", "absent"), snapshot)
    assert isinstance(result, Failure)
    assert "resource claim absent not found" in result.message
    result = schedule(claim_pod("r", template="tpl"), snapshot)
    assert isinstance(result, Failure)
    assert "waiting for resource claim from-template (template tpl) to be created" in (
        result.message
    )


def test_a_template_claim_once_created_is_allocated() -> None:
    snapshot = one_node(claim("r-from-template-x", [exactly("gpus", 2)]))
    obj = claim_pod("r", template="tpl")
    obj["status"] = {
        "resourceClaimStatuses": [
            {"name": "from-template", "resourceClaimName": "r-from-template-x"}
        ]
    }
    d = decided(schedule(obj, snapshot))
    assert d.claims[0].name == "r-from-template-x"


def test_a_pool_with_duplicate_device_names_is_named_in_the_reason() -> None:
    topo = dgx1("d")
    s = gpu_slice("d", topo)
    s["spec"]["devices"][1]["name"] = "gpu-0"
    snapshot = Snapshot(
        [dra_node("d", topo)], dra=state([s], claims=[claim("c", [exactly("gpus", 1)])])
    )
    result = schedule(claim_pod("p", "c"), snapshot)
    assert isinstance(result, Failure)
    assert "cannot allocate claim c: no 1 device of class gpu.nvidia.com free" in result.message
    assert "pool gpu.nvidia.com/d lists device gpu-0 more than once" in result.message


def test_malformed_cel_is_a_reason_on_that_pod_only() -> None:
    bad = device_class("broken", ["device.driver =="])
    snapshot = one_node(
        claim("bad", [exactly("gpus", 1, cls="broken")]),
        claim("good", [exactly("gpus", 1)]),
        classes=[device_class(), bad],
    )
    result = schedule(claim_pod("p", "bad"), snapshot)
    assert isinstance(result, Failure)
    assert "device class broken: selector 0 does not compile" in result.message
    assert decided(schedule(claim_pod("q", "good"), snapshot)).claims


def test_request_selectors_and_first_available_alternatives() -> None:
    big = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0"
    small = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('16Gi')) >= 0"
    c = claim(
        "c",
        [
            {
                "name": "gpu",
                "firstAvailable": [
                    {
                        "name": "big",
                        "deviceClassName": DRIVER,
                        "count": 1,
                        "selectors": [{"cel": {"expression": big}}],
                    },
                    {
                        "name": "small",
                        "deviceClassName": DRIVER,
                        "count": 2,
                        "selectors": [{"cel": {"expression": small}}],
                    },
                ],
            }
        ],
    )
    d = decided(schedule(claim_pod("p", "c"), one_node(c)))
    assert {r.request for r in d.claims[0].results} == {"gpu/small"}
    assert len(d.claims[0].results) == 2


def test_match_attribute_keeps_devices_on_one_pcie_root() -> None:
    c = claim(
        "c",
        [exactly("a", 2), exactly("b", 2)],
        constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
    )
    d = decided(schedule(claim_pod("p", "c"), one_node(c)))
    gpus = d.placement.gpus
    assert len(gpus) == 4
    topo = dgx1("d")
    assert len({topo.gpus[i].numa_node for i in gpus}) == 1
    too_many = claim(
        "t",
        [exactly("gpus", 5)],
        constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
    )
    result = schedule(claim_pod("q", "t"), one_node(too_many))
    assert isinstance(result, Failure)
    assert "no 5 devices of class gpu.nvidia.com with matching resource.kubernetes.io/pcieRoot" in (
        result.message
    )


def test_distinct_attribute_takes_devices_with_different_values() -> None:
    c = claim(
        "c",
        [exactly("gpus", 2)],
        constraints=[{"distinctAttribute": "resource.kubernetes.io/pcieRoot"}],
    )
    d = decided(schedule(claim_pod("p", "c"), one_node(c)))
    topo = dgx1("d")
    assert len({topo.gpus[i].numa_node for i in d.placement.gpus}) == 2


def test_all_mode_takes_every_matching_device_or_none() -> None:
    c = claim("c", [exactly("gpus", mode="All")])
    d = decided(schedule(claim_pod("p", "c"), one_node(c)))
    assert len(d.claims[0].results) == 8
    busy = one_node(c, claim("x", [exactly("gpus", 1)], allocation=allocated_on("d", ["gpu-0"])))
    result = schedule(claim_pod("p", "c"), busy)
    assert isinstance(result, Failure)
    assert "not all devices" in result.message


def test_device_taints_need_a_toleration() -> None:
    topo = dgx1("d")
    s = gpu_slice("d", topo)
    for dev in s["spec"]["devices"]:
        dev["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    plain = claim("plain", [exactly("gpus", 1)])
    tolerant = claim(
        "tolerant",
        [exactly("gpus", 1, tolerations=[{"key": "maintenance", "operator": "Exists"}])],
    )
    snapshot = Snapshot([dra_node("d", topo)], dra=state([s], claims=[plain, tolerant]))
    assert isinstance(schedule(claim_pod("p", "plain"), snapshot), Failure)
    assert decided(schedule(claim_pod("q", "tolerant"), snapshot)).claims


def test_reserved_for_full_is_refused() -> None:
    full = claim(
        "c",
        [exactly("gpus", 1)],
        allocation=allocated_on("d", ["gpu-0"]),
        reserved_for=[f"u{i}" for i in range(256)],
    )
    result = schedule(claim_pod("p", "c", uid="mine"), one_node(full))
    assert isinstance(result, Failure)
    assert "reserved for 256 pods" in result.message


def test_pods_without_claims_are_untouched_by_dra() -> None:
    snapshot = one_node()
    d = decided(schedule(pod("cpu"), snapshot))
    assert d.claims == ()


# --- KEP-5004: extended resources served by DRA ----------------------------------------------


def gpu_class() -> dict[str, Any]:
    return device_class(extended="nvidia.com/gpu")


def test_unchanged_gpu_pod_is_served_by_dra_where_the_node_lists_no_gpus() -> None:
    topo = dgx1("d")
    snapshot = Snapshot(
        [dra_node("d", topo)], dra=state([gpu_slice("d", topo)], classes=[gpu_class()])
    )
    d = decided(schedule(pod("job", gpus=4), snapshot))
    assert set(d.placement.gpus) in QUADS
    (alloc,) = d.claims
    assert alloc.extended
    assert alloc.name == ""
    assert alloc.spec == {
        "devices": {
            "requests": [
                {
                    "name": "container-0-request-2",  # sorted: cpu, memory, nvidia.com/gpu
                    "exactly": {
                        "deviceClassName": DRIVER,
                        "allocationMode": "ExactCount",
                        "count": 4,
                    },
                }
            ]
        }
    }
    assert alloc.extended_requests == (("main", "nvidia.com/gpu", "container-0-request-2"),)
    assert {r.request for r in alloc.results} == {"container-0-request-2"}


def test_a_node_listing_the_resource_keeps_the_device_plugin_path() -> None:
    topo = dgx1("d")
    snapshot = Snapshot(
        [gpu_node("d", topo)], dra=state([gpu_slice("d", topo)], classes=[gpu_class()])
    )
    d = decided(schedule(pod("job", gpus=4), snapshot))
    assert d.claims == ()
    assert set(d.placement.gpus) in QUADS


def test_extended_pods_are_rejected_without_a_mapping_class() -> None:
    topo = dgx1("d")
    snapshot = Snapshot([dra_node("d", topo)], dra=state([gpu_slice("d", topo)]))
    result = schedule(pod("job", gpus=4), snapshot)
    assert isinstance(result, Failure)
    assert "Insufficient nvidia.com/gpu" in result.message


def test_extended_pods_do_not_get_the_same_gpus() -> None:
    topo = dgx1("d")
    snapshot = Snapshot(
        [dra_node("d", topo)], dra=state([gpu_slice("d", topo)], classes=[gpu_class()])
    )
    results = place([pod(f"j{i}", gpus=4) for i in range(3)], snapshot)
    a, b = decided(results[0]), decided(results[1])
    assert not set(a.placement.gpus) & set(b.placement.gpus)
    assert isinstance(results[2], Failure)


def test_empty_dra_state_leaves_gpu_pods_alone() -> None:
    snapshot = Snapshot([gpu_node("d", dgx1("d"))], dra=DraState())
    assert decided(schedule(pod("job", gpus=2), snapshot)).claims == ()


# --- gangs ---------------------------------------------------------------------------------


def test_gang_members_with_claims_never_get_the_same_gpus() -> None:
    from coordinator.core.gangs.cycle import GangDecision, schedule_gang
    from devcluster.pods import gang_members

    objs = gang_members("train", 2, prefix="w", cpu="1", memory="1Gi")
    for i, obj in enumerate(objs):
        obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"w{i}-gpus"}]
    claims = [claim(f"w{i}-gpus", [exactly("gpus", 4)]) for i in range(2)]
    # with the agent's topology (GPUs tracked by index) and without (devices tracked by claim)
    topo = dgx1("d")
    for node in (dra_node("d", topo), plain_node("d")):
        snapshot = Snapshot([node], dra=state([gpu_slice("d", topo)], claims=claims))
        decided_gang = schedule_gang([request(o) for o in objs], snapshot, build_framework())
        assert isinstance(decided_gang, GangDecision), decided_gang
        claimed = [devices(d.claims[0]) for d in decided_gang.decisions]
        assert not set(claimed[0]) & set(claimed[1])
    held = [set(d.placement.gpus) for d in decided_gang.decisions]
    assert held == [set(), set()]  # no agent: nothing promised by index


def test_gang_with_agent_topology_gets_both_quads() -> None:
    from coordinator.core.gangs.cycle import GangDecision, schedule_gang
    from devcluster.pods import gang_members

    objs = gang_members("train", 2, prefix="w", cpu="1", memory="1Gi")
    for i, obj in enumerate(objs):
        obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"w{i}-gpus"}]
    snapshot = one_node(*(claim(f"w{i}-gpus", [exactly("gpus", 4)]) for i in range(2)))
    decided_gang = schedule_gang([request(o) for o in objs], snapshot, build_framework())
    assert isinstance(decided_gang, GangDecision), decided_gang
    held = sorted(sorted(d.placement.gpus) for d in decided_gang.decisions)
    assert held == [[0, 1, 2, 3], [4, 5, 6, 7]]
    claimed = [devices(d.claims[0]) for d in decided_gang.decisions]
    assert not set(claimed[0]) & set(claimed[1])


def test_admin_access_may_use_allocated_devices_and_takes_none() -> None:
    admin = claim("admin", [exactly("gpus", 8)])
    admin["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    held = claim("held", [exactly("gpus", 1)], allocation=allocated_on("d", ["gpu-0"]))
    snapshot = one_node(admin, held, claim("after", [exactly("gpus", 7)]))
    first = place([claim_pod("monitor", "admin")], snapshot)
    assert all(r.admin_access for r in decided(first[0]).claims[0].results)
    assert len(decided(first[0]).claims[0].results) == 8
    # the monitor took nothing: the seven GPUs nobody holds are still there
    assert len(decided(schedule(claim_pod("p", "after"), snapshot)).claims[0].results) == 7


def test_forgetting_a_pod_releases_its_claims() -> None:
    topo = dgx1("bare")
    snapshot = Snapshot(
        [plain_node("bare")],
        dra=state([gpu_slice("bare", topo)], claims=[claim("c", [exactly("gpus", 8)])]),
    )
    (d,) = place([claim_pod("p", "c")], snapshot)
    assert snapshot.dra.claim("default", "c").allocation is not None  # type: ignore[union-attr]
    other = state([gpu_slice("bare", topo)], claims=[claim("x", [exactly("gpus", 1)])])
    snapshot.dra = other.with_allocations(decided(d).claims)  # our write, not yet watched
    assert isinstance(schedule(claim_pod("q", "x"), snapshot), Failure)
    snapshot.dra = other
    assert snapshot.forget("default/p")
    assert decided(schedule(claim_pod("q", "x"), snapshot)).claims


def test_a_claim_allocated_before_a_restart_names_its_gpus_on_the_pod() -> None:
    # Allocated (by us, before a crash) and reserved for the pod; the node's agent may not
    # have reported yet: the pod's topos.io/assigned-gpus still names the claim's GPUs.
    topo = dgx1("d")
    kept = claim(
        "kept",
        [exactly("gpus", 2)],
        allocation=allocated_on("d", ["gpu-6", "gpu-7"]),
        reserved_for=["uid-again"],
    )
    obj = claim_pod("again", "kept")
    obj["metadata"]["uid"] = "uid-again"
    for node in (dra_node("d", topo), plain_node("d")):
        snapshot = Snapshot([node], dra=state([gpu_slice("d", topo)], claims=[kept]))
        d = decided(schedule(obj, snapshot))
        assert d.claims[0].reserve_only
        assigned = d.annotations()["topos.io/assigned-gpus"]
        assert assigned == f"{topo.gpus[6].uuid},{topo.gpus[7].uuid}"


def test_a_malformed_slice_of_the_node_is_named_when_its_devices_are_missing() -> None:
    from coordinator.core.dra.state import parse_resource_slice

    topo = dgx1("d")
    extra = gpu_slice("d", topo, name="d-extra")
    extra["spec"]["pool"]["name"] = "d-extra"
    extra["spec"]["devices"][0]["capacity"] = {"memory": {"value": "lots"}}
    bad = parse_resource_slice(extra)
    assert isinstance(bad, DraObjectError)
    good = state([gpu_slice("d", topo)], claims=[claim("big", [exactly("gpus", 9)])])
    dra = DraState(good.slices, good.classes, good.claims, rejected=[bad])
    result = schedule(claim_pod("p", "big"), Snapshot([dra_node("d", topo)], dra=dra))
    assert isinstance(result, Failure)
    assert "ResourceSlice d-extra is ignored: spec.devices[0].capacity" in result.message


def test_claim_pods_fill_every_device_of_many_nodes_and_the_next_is_told_each_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pods whose claims need a device are tried only on nodes with a device no claim holds
    (an index, kept per node): the same nodes and devices, from the same rotating start, as
    when every node is filtered. 120 nodes of two devices take 240 one-device claims, each
    device once, and the next pod is refused naming every node. A pod sharing an allocated
    claim goes to the claim's node."""
    names = [f"n{i:03d}" for i in range(120)]
    slices = [resource_slice(n, [{"name": "dev-0"}, {"name": "dev-1"}]) for n in names]
    claims = [claim(f"c{i}", [exactly("gpus", 1)]) for i in range(241)]

    def fill() -> tuple[list[ScheduleResult], Snapshot]:
        snapshot = Snapshot(
            [plain_node(n) for n in names],
            dra=state(slices, (device_class(selectors=[]),), claims),
        )
        fw = build_framework()  # one framework: its rotating start moves from pod to pod
        out = []
        for i in range(241):
            obj = claim_pod(f"p{i}", f"c{i}")
            result = schedule_one(obj, snapshot, fw)
            if isinstance(result, Decision):
                snapshot.assume(request(obj), result.node, result.placement, result.claims)
            out.append(result)
        return out, snapshot

    results, snapshot = fill()
    held = [(d.node, devices(a)[0]) for d in map(decided, results[:240]) for a in d.claims]
    assert len(set(held)) == 240
    last = results[240]
    assert isinstance(last, Failure)
    assert last.message.startswith("0/120 nodes are available: 120 cannot allocate claim c240")
    sharing = decided(schedule(claim_pod("q", "c17"), snapshot))
    assert sharing.node == decided(results[17]).node
    assert sharing.claims[0].reserve_only
    monkeypatch.setattr(DynamicResources, "candidates", lambda *_: None)  # every node filtered
    walked, _ = fill()
    assert [(d.node, devices(a)[0]) for d in map(decided, walked[:240]) for a in d.claims] == held
    assert isinstance(walked[240], Failure)
    assert walked[240].message == last.message
