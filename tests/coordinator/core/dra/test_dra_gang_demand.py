"""Gangs whose GPUs come from ResourceClaims plan like ``nvidia.com/gpu`` gangs: a member counts
the GPUs its unallocated claims ask for (a claim members share, once), a node whose GPUs only DRA
serves offers its free GPUs, so a gang larger than a node spreads instead of being refused."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coordinator.core.domains.capacity import GPU, node_states
from coordinator.core.gangs.cycle import GangDecision, members_of, schedule_gang
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import gang_members
from tests.coordinator.core.dra.dra_objects import (
    claim,
    device_class,
    exactly,
    gpu_slice,
    state,
)
from tests.support.dra import allocated_on
from tests.support.sched_hw import dgx1, gpu_node, request

QUADS = ([0, 1, 2, 3], [4, 5, 6, 7])
NIC_CLASS = device_class("nic.example.com", ("device.driver == 'nic.example.com'",))


def dra_cluster(
    *names: str, claims: Sequence[Mapping[str, Any]] = (), classes: Sequence[Any] = ()
) -> Snapshot:
    """DGX-1 nodes whose GPUs only DRA serves (no nvidia.com/gpu allocatable)."""
    topos = {n: dgx1(n) for n in names}
    nodes = [gpu_node(n, t, gpus=0) for n, t in topos.items()]
    slices = [gpu_slice(n, t) for n, t in topos.items()]
    return Snapshot(nodes, dra=state(slices, (device_class(), *classes), claims))


def gang(members: int, claim_of: Any) -> list[dict[str, Any]]:
    objs = gang_members("train", members, prefix="w", cpu="1", memory="1Gi")
    for i, obj in enumerate(objs):
        obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim_of(i)}]
    return objs


def test_a_gang_of_three_quad_claims_spans_two_nodes_one_quad_each() -> None:
    claims = [claim(f"w{i}-gpus", [exactly("gpus", 4)]) for i in range(3)]
    snapshot = dra_cluster("a", "b", claims=claims)
    objs = gang(3, lambda i: f"w{i}-gpus")
    decided = schedule_gang([request(o) for o in objs], snapshot, build_framework())
    assert isinstance(decided, GangDecision), decided
    placed = [(d.node, tuple(sorted(d.placement.gpus))) for d in decided.decisions]
    assert len(set(placed)) == 3
    assert {node for node, _ in placed} == {"a", "b"}
    assert all(list(gpus) in QUADS for _, gpus in placed)


def test_a_gang_whose_claims_no_two_nodes_hold_says_gpus() -> None:
    claims = [claim(f"w{i}-gpus", [exactly("gpus", 8)]) for i in range(3)]
    snapshot = dra_cluster("a", "b", claims=claims)
    refused = schedule_gang(
        [request(o) for o in gang(3, lambda i: f"w{i}-gpus")], snapshot, build_framework()
    )
    assert not isinstance(refused, GangDecision)
    assert "24 nvidia.com/gpu" in refused.message, refused.message


def test_members_sharing_one_claim_count_its_gpus_once() -> None:
    # Two members, one 8-GPU claim: counted twice they would need 16 GPUs of one DGX-1.
    snapshot = dra_cluster("a", claims=[claim("shared", [exactly("gpus", 8)])])
    pods = [request(o) for o in gang(2, lambda i: "shared")]
    assert [m.requests.get(GPU, 0) for m in members_of(pods, snapshot)] == [8, 0]
    decided = schedule_gang(pods, snapshot, build_framework())
    assert isinstance(decided, GangDecision), decided
    assert {d.node for d in decided.decisions} == {"a"}


def test_allocated_claims_and_claims_of_other_devices_ask_no_gpus() -> None:
    claims = [
        claim("held", [exactly("gpus", 2)], allocation=allocated_on("a", ["gpu-0", "gpu-1"])),
        claim("nic", [exactly("nics", 1, cls=NIC_CLASS["metadata"]["name"])]),
        claim(
            "either",
            [
                {
                    "name": "gpus",
                    "firstAvailable": [
                        {"name": "eight", "deviceClassName": "gpu.nvidia.com", "count": 8},
                        {"name": "two", "deviceClassName": "gpu.nvidia.com", "count": 2},
                    ],
                }
            ],
        ),
    ]
    snapshot = dra_cluster("a", claims=claims, classes=[NIC_CLASS])
    pods = [request(o) for o in gang(3, lambda i: ("held", "nic", "either")[i])]
    # the allocated claim's GPUs are held already; a NIC is no GPU; firstAvailable may take two
    assert [m.requests.get(GPU, 0) for m in members_of(pods, snapshot)] == [0, 0, 2]


def test_a_dra_node_offers_its_free_gpus() -> None:
    held = claim(
        "held", [exactly("gpus", 3)], allocation=allocated_on("a", ["gpu-0", "gpu-1", "gpu-2"])
    )
    (node,) = node_states(dra_cluster("a", claims=[held]))
    assert (node.gpus_total, node.gpus_free, node.gpus_used) == (8, 5, 3)
    assert node.link == "nvlink"


def test_unchanged_gpu_pods_gang_across_dra_nodes() -> None:
    # KEP-5004: pods asking nvidia.com/gpu on nodes whose GPUs only DRA serves.
    topos = {n: dgx1(n) for n in ("a", "b")}
    snapshot = Snapshot(
        [gpu_node(n, t, gpus=0) for n, t in topos.items()],
        dra=state(
            [gpu_slice(n, t) for n, t in topos.items()],
            classes=[device_class(extended="nvidia.com/gpu")],
        ),
    )
    objs = gang_members("train", 3, prefix="w", cpu="1", memory="1Gi", gpus=4)
    decided = schedule_gang([request(o) for o in objs], snapshot, build_framework())
    assert isinstance(decided, GangDecision), decided
    assert {d.node for d in decided.decisions} == {"a", "b"}
    assert all(len(d.claims) == 1 and d.claims[0].extended for d in decided.decisions)
