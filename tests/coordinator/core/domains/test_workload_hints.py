"""The seed-003 hints as placement acts on them: ``gpu-count`` checked against the members'
limits, ``network-bandwidth`` filtering labelled nodes, ``latency-sensitive`` keeping off nodes
that share GPUs as MIG instances, and a preferred domain the cluster lacks reported."""

from __future__ import annotations

from dataclasses import replace

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.packing import Member, Placement
from coordinator.core.domains.select import place_members
from coordinator.core.domains.strategy import (
    NODE_BANDWIDTH_LABEL,
    PlacementIntent,
    gpu_count_disagreement,
    placement_intent,
)
from coordinator.core.status import Code, Status
from tests.support.domain_fabric import fabric


def members(n: int, gpus: int) -> list[Member]:
    return [Member(name=f"w-{i}", requests={GPU: gpus}) for i in range(n)]


def placed(result: Placement | Status) -> Placement:
    assert isinstance(result, Placement), result.message  # type: ignore[union-attr]
    return result


def test_gpu_count_is_the_groups_total_or_each_members() -> None:
    assert gpu_count_disagreement(PlacementIntent(gpu_count=16), [4, 4, 4, 4]) is None
    assert gpu_count_disagreement(PlacementIntent(gpu_count=1), [1, 1, 1]) is None
    intent = placement_intent({"topology.scheduler/gpu-count": "16"})
    assert isinstance(intent, PlacementIntent)
    assert gpu_count_disagreement(intent, [4, 4, 4]) == (
        "annotation topology.scheduler/gpu-count=16 disagrees with the GPU limits: 3 pods ask "
        "for 12 nvidia.com/gpu (4 each); make them agree"
    )


def test_gpu_count_counts_the_members_already_running() -> None:
    # A 2 x 8-GPU Job annotated 16 lost a member: its replacement is judged with the survivor.
    job = placement_intent({"topology.scheduler/gpu-count": "16"})
    assert isinstance(job, PlacementIntent)
    assert gpu_count_disagreement(replace(job, placed_gpus=(8,)), [8]) is None
    assert gpu_count_disagreement(replace(job, placed_gpus=(8, 8)), [8]) == (
        "annotation topology.scheduler/gpu-count=16 disagrees with the GPU limits: 3 pods ask "
        "for 24 nvidia.com/gpu (8 each, 2 of them running); make them agree"
    )
    p = placed(place_members(members(1, 8), fabric(), intent=replace(job, placed_gpus=(8,))))
    assert len(p.nodes) == 1


def test_a_contradicting_gpu_count_refuses_the_group_for_good() -> None:
    result = place_members(members(2, 8), fabric(), intent=PlacementIntent(gpu_count=8 * 3))
    assert isinstance(result, Status)
    assert result.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "gpu-count=24 disagrees" in result.message


def test_network_bandwidth_filters_labelled_nodes_only() -> None:
    nodes = fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=2)
    slow = {"l1-n1", "l1-n2"}
    nodes = [
        replace(n, labels={**n.labels, NODE_BANDWIDTH_LABEL: "100Gb"}) if n.name in slow else n
        for n in nodes
    ]
    intent = PlacementIntent(network_bandwidth_gbps=200.0, preferred_domain="leaf-1")
    p = placed(place_members(members(2, 8), nodes, intent=intent))
    assert not set(p.nodes) & slow
    # Unlabelled nodes are not presumed slow; labelled fast ones qualify.
    fast = [replace(n, labels={**n.labels, NODE_BANDWIDTH_LABEL: "400Gbps"}) for n in nodes]
    assert placed(place_members(members(2, 8), fast, intent=intent)).leaves == ("leaf-1",)
    result = place_members(members(5, 8), nodes, intent=intent)
    assert isinstance(result, Status)
    assert "less network bandwidth" in result.message


def _mig_sharing(node: NodeState) -> NodeState:
    allocatable = {**node.allocatable, "nvidia.com/mig-1g.5gb": 7}
    return replace(node, allocatable=allocatable)


def test_latency_sensitive_jobs_use_mig_sharing_nodes_last() -> None:
    nodes = fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3)
    nodes = [_mig_sharing(n) if n.name != "l1-n3" else n for n in nodes]
    quiet = placed(
        place_members(members(1, 4), nodes, intent=PlacementIntent(latency_sensitive=True))
    )
    assert quiet.nodes == ("l1-n3",)
    # When only MIG-sharing nodes have room, it still runs.
    busy = [replace(n, free={**n.free, GPU: 0}) if n.name == "l1-n3" else n for n in nodes]
    p = placed(place_members(members(1, 4), busy, intent=PlacementIntent(latency_sensitive=True)))
    assert p.nodes[0] != "l1-n3"


def test_a_preferred_domain_the_cluster_lacks_is_reported() -> None:
    p = placed(
        place_members(members(2, 8), fabric(), intent=PlacementIntent(preferred_domain="spine-9"))
    )
    assert p.unknown_domain == "spine-9"
    assert "preferred domain 'spine-9' is not a known leaf, spine or zone" in p.explanation
    known = placed(
        place_members(members(2, 8), fabric(), intent=PlacementIntent(preferred_domain="leaf-3"))
    )
    assert known.unknown_domain is None
    assert known.leaves == ("leaf-3",)
