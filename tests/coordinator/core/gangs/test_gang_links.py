"""A gang asking for GPUs takes the best GPU link class its members can all get before packing,
and its plan says so."""

from __future__ import annotations

from coordinator.core.domains.capacity import GPU, NodeState, node_state
from coordinator.core.domains.packing import Member, Placement
from coordinator.core.domains.select import place_members
from coordinator.core.domains.strategy import PlacementIntent, Strategy
from coordinator.core.gangs.cycle import GangDecision, schedule_gang
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import gang_members
from tests.support.sched_hw import dgx1, dgx_h100, gpu_node, pcie8, request

CONSOLIDATED = PlacementIntent(strategy=Strategy.CONSOLIDATED)


def _node(name: str, leaf: str, link: str | None, free: int = 8) -> NodeState:
    return NodeState(
        name=name,
        labels={"topos.io/leaf": leaf, "topos.io/spine": "spine-1"},
        allocatable={GPU: 8, "pods": 110},
        free={GPU: free, "pods": 110},
        link=link,
    )


def _members(n: int, gpus: int) -> list[Member]:
    return [Member(name=f"w-{i}", requests={GPU: gpus, "pods": 1}) for i in range(n)]


def test_node_states_carry_the_gpu_link_class() -> None:
    assert node_state(gpu_node("h", dgx_h100("h"))).link == "nvswitch"
    assert node_state(gpu_node("d", dgx1("d"))).link == "nvlink"
    assert node_state(gpu_node("p", pcie8("p"))).link == "pcie"


def test_a_consolidated_gang_takes_idle_nvswitch_nodes_over_fewer_pcie_ones() -> None:
    # Two 8-GPU PCIe nodes would hold 4×4 GPUs in two machines; four NVSwitch nodes sit idle
    # in another leaf with one GPU taken on each, so the gang needs all four of them.
    nodes = [_node("l40s-1", "leaf-a", "pcie"), _node("l40s-2", "leaf-a", "pcie")]
    nodes += [_node(f"h100-{i}", "leaf-b", "nvswitch", free=7) for i in range(4)]
    found = place_members(_members(4, 4), nodes, intent=CONSOLIDATED)
    assert isinstance(found, Placement)
    assert set(found.nodes) == {f"h100-{i}" for i in range(4)}
    assert found.link == "nvswitch"
    assert "GPU links nvswitch: the best class on offer (pcie nodes passed over)" in (
        found.explanation
    )
    assert found.explanation.startswith("leaf leaf-b (4 nodes, consolidated)")


def test_nvlink_ranks_between_nvswitch_and_pcie() -> None:
    nodes = [_node("p", "leaf-a", "pcie"), _node("d", "leaf-a", "nvlink")]
    found = place_members(_members(2, 4), nodes, intent=CONSOLIDATED)
    assert isinstance(found, Placement)
    assert found.nodes == ("d",)
    assert found.link == "nvlink"


def test_the_gang_falls_back_to_pcie_only_when_better_nodes_cannot_hold_it() -> None:
    nodes = [_node("l40s-1", "leaf-a", "pcie"), _node("l40s-2", "leaf-a", "pcie")]
    nodes += [_node("h100-1", "leaf-b", "nvswitch", free=4)]
    found = place_members(_members(4, 4), nodes, intent=CONSOLIDATED)
    assert isinstance(found, Placement)
    assert found.link == "pcie"
    assert "GPU links pcie: nvswitch nodes alone could not hold every member" in found.notes


def test_gangs_without_gpus_and_clusters_of_one_class_are_packed_as_before() -> None:
    nodes = [_node("p", "leaf-a", "pcie"), _node("h", "leaf-b", "nvswitch")]
    cpu_only = [Member(name=f"c-{i}", requests={"pods": 1}) for i in range(2)]
    one_gpu = [Member(name="g", requests={GPU: 1, "pods": 1})]
    for members in (cpu_only, one_gpu):
        found = place_members(members, nodes, intent=CONSOLIDATED)
        assert isinstance(found, Placement)
        assert found.link is None
        assert not found.notes
    same = [_node("h1", "leaf-a", "nvswitch"), _node("h2", "leaf-a", "nvswitch")]
    found = place_members(_members(2, 4), same, intent=CONSOLIDATED)
    assert isinstance(found, Placement)
    assert found.link == "nvswitch"
    assert not found.notes


def test_schedule_gang_on_the_snapshot_prefers_nvswitch_and_explains_it() -> None:
    def labelled(leaf: str) -> dict[str, str]:
        return {"topos.io/leaf": leaf, "topos.io/spine": "spine-1"}

    snapshot = Snapshot(
        [gpu_node(f"l40s-{i}", pcie8(f"l40s-{i}"), labels=labelled("leaf-a")) for i in (1, 2)]
        + [gpu_node(f"h100-{i}", dgx_h100(f"h100-{i}"), labels=labelled("leaf-b")) for i in (1, 2)]
    )
    pods = [
        request(obj)
        for obj in gang_members(
            "train",
            4,
            prefix="w",
            namespace="ml",
            gpus=4,
            cpu=None,
            memory=None,
            annotations={"topos.io/placement": "consolidated"},
        )
    ]
    decided = schedule_gang(pods, snapshot, build_framework(), min_member=4, intent=CONSOLIDATED)
    assert isinstance(decided, GangDecision)
    assert {d.node for d in decided.decisions} == {"h100-1", "h100-2"}
    assert "GPU links nvswitch" in decided.plan.placement.explanation
