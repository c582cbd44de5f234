"""Multi-node jobs on a leaf–spine fabric land where docs/design.md §4's network rules say.

Fabric: 2 spines × 4 leaves × 4 nodes × 8 GPUs (leaf-1..4 under spine-1, leaf-5..8 under
spine-2). Members ask for whole nodes (8 GPUs) unless a test says otherwise.
"""

from __future__ import annotations

import pytest

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.packing import Member, Placement
from coordinator.core.domains.select import place_members
from coordinator.core.domains.strategy import PlacementIntent, Strategy
from coordinator.core.status import Code, Status
from tests.support.domain_fabric import fabric, fill_leaf


def members(n: int, gpus: int = 8) -> list[Member]:
    return [Member(name=f"w-{i}", requests={GPU: gpus, "cpu": 4000}) for i in range(n)]


def placed(result: Placement | Status) -> Placement:
    assert isinstance(result, Placement), result.message  # type: ignore[union-attr]
    return result


@pytest.mark.parametrize(
    ("count", "tier", "leaves"),
    [
        (1, "node", ("leaf-1",)),
        (2, "leaf", ("leaf-1",)),
        (4, "leaf", ("leaf-1",)),  # a leaf's worth → one whole leaf
        (8, "spine", ("leaf-1", "leaf-2")),  # two adjacent leaves
        (16, "spine", ("leaf-1", "leaf-2", "leaf-3", "leaf-4")),  # four adjacent leaves
    ],
)
def test_job_sizes_on_an_idle_fabric(count: int, tier: str, leaves: tuple[str, ...]) -> None:
    p = placed(place_members(members(count), fabric()))
    assert p.tier == tier
    assert p.leaves == leaves
    assert p.spines == ("spine-1",)
    assert len(p.nodes) == count
    assert p.adjacent


def test_two_nodes_stay_in_one_leaf_even_when_the_first_leaf_has_only_one_free_node() -> None:
    used = {"l1-n1": 8, "l1-n2": 8, "l1-n3": 8}  # leaf-1: one idle node left
    p = placed(place_members(members(2), fabric(used=used)))
    assert len(p.leaves) == 1
    assert p.leaves != ("leaf-1",)


def test_a_full_leaf_job_takes_a_whole_free_leaf() -> None:
    used = {"l1-n1": 2}  # leaf-1 is not whole any more
    p = placed(place_members(members(4), fabric(used=used)))
    assert p.leaves == ("leaf-2",)
    assert set(p.nodes) == {"l2-n1", "l2-n2", "l2-n3", "l2-n4"}


def test_adjacent_leaves_are_preferred_to_scattered_ones() -> None:
    p = placed(place_members(members(8), fabric(used=fill_leaf(2))))
    # leaf-1 + leaf-3 would also hold 8 nodes, but they are not neighbours; leaf-3 + leaf-4 are.
    assert p.leaves == ("leaf-3", "leaf-4")
    assert p.adjacent


def test_scattered_leaves_of_one_spine_before_a_second_spine() -> None:
    used = {**fill_leaf(2), **fill_leaf(4), **fill_leaf(6), **fill_leaf(8)}
    p = placed(place_members(members(8), fabric(used=used)))
    assert p.leaves == ("leaf-1", "leaf-3")
    assert p.spines == ("spine-1",)
    assert not p.adjacent


def test_never_wider_than_needed_a_job_moves_spines_rather_than_straddle() -> None:
    p = placed(place_members(members(16), fabric(used={"l3-n1": 1})))
    assert p.spines == ("spine-2",)
    assert len(p.leaves) == 4


def test_a_job_bigger_than_a_spine_spans_spines_unless_latency_sensitive() -> None:
    p = placed(place_members(members(20), fabric()))
    assert p.tier == "cluster"
    assert p.spines == ("spine-1", "spine-2")
    assert len(p.leaves) == 5  # fewest leaves: four whole leaves + part of one more

    refused = place_members(members(20), fabric(), intent=PlacementIntent(latency_sensitive=True))
    assert isinstance(refused, Status)
    assert refused.code is Code.UNSCHEDULABLE
    assert "must fit in one spine" in refused.message


def test_zone_tier_is_used_before_the_whole_cluster() -> None:
    nodes = fabric(zone=True, used={**fill_leaf(1), **fill_leaf(5)})
    p = placed(place_members(members(13), nodes))
    # 12 free nodes per spine: 13 needs more than a spine, and each zone is one spine here
    assert p.tier == "cluster"
    p = placed(place_members(members(12), nodes))
    assert p.tier == "spine"


def test_preferred_leaf_is_tried_first() -> None:
    intent = PlacementIntent(preferred_domain="leaf-7")
    p = placed(place_members(members(2), fabric(), intent=intent))
    assert p.leaves == ("leaf-7",)
    assert p.preferred_domain_used


def test_preferred_leaf_too_small_falls_back_to_its_spine() -> None:
    intent = PlacementIntent(preferred_domain="leaf-6")
    p = placed(place_members(members(8), fabric(), intent=intent))
    assert p.spines == ("spine-2",)
    assert "leaf-6" in p.leaves or p.leaves == ("leaf-5", "leaf-6")


def test_preferred_spine_and_unknown_domain() -> None:
    p = placed(
        place_members(members(4), fabric(), intent=PlacementIntent(preferred_domain="spine-2"))
    )
    assert p.spines == ("spine-2",)
    p = placed(
        place_members(members(2), fabric(), intent=PlacementIntent(preferred_domain="leaf-99"))
    )
    assert not p.preferred_domain_used
    assert any("leaf-99" in note for note in p.notes)


def test_consolidated_versus_distributed() -> None:
    job = members(4, gpus=2)
    tight = placed(
        place_members(job, fabric(), intent=PlacementIntent(strategy=Strategy.CONSOLIDATED))
    )
    assert len(tight.nodes) == 1
    spread = placed(
        place_members(job, fabric(), intent=PlacementIntent(strategy=Strategy.DISTRIBUTED))
    )
    assert len(spread.nodes) == 4
    assert len(spread.leaves) == 4  # one member per leaf: a leaf switch failure costs one replica


def test_distributed_latency_sensitive_stays_in_one_spine() -> None:
    intent = PlacementIntent(strategy=Strategy.DISTRIBUTED, latency_sensitive=True)
    p = placed(place_members(members(6, gpus=1), fabric(), intent=intent))
    assert len(p.spines) == 1
    assert len(p.nodes) == 6
    assert len(p.leaves) == 4


def test_distributed_doubles_up_only_when_nodes_run_out() -> None:
    nodes = fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    p = placed(
        place_members(
            members(3, gpus=2), nodes, intent=PlacementIntent(strategy=Strategy.DISTRIBUTED)
        )
    )
    assert len(p.nodes) == 2


def test_balanced_fills_partly_used_nodes_first_consolidated_takes_an_idle_node() -> None:
    used = {"l1-n1": 6}  # 2 GPUs left on l1-n1
    job = members(1, gpus=2)
    balanced = placed(place_members(job, fabric(used=used)))
    assert balanced.nodes == ("l1-n1",)
    job = members(2, gpus=2)
    consolidated = placed(
        place_members(
            job, fabric(used=used), intent=PlacementIntent(strategy=Strategy.CONSOLIDATED)
        )
    )
    assert len(consolidated.nodes) == 1
    assert consolidated.nodes != ("l1-n1",)


def test_mixed_members_fit_on_cpu_only_nodes() -> None:
    nodes = [
        NodeState(
            name=f"cpu-{i}",
            labels={"topos.io/leaf": "leaf-a"},
            allocatable={"cpu": 16_000, "memory": 64 * 2**30},
            free={"cpu": 16_000, "memory": 64 * 2**30},
        )
        for i in range(3)
    ]
    driver = Member(name="driver", requests={"cpu": 2000, "memory": 4 * 2**30})
    executors = [
        Member(name=f"exec-{i}", requests={"cpu": 4000, "memory": 8 * 2**30}) for i in range(10)
    ]
    p = placed(place_members([driver, *executors], nodes))
    assert len(p.assignments) == 11
    load: dict[str, int] = {}
    for name, node in p.assignments:
        load[node] = load.get(node, 0) + (2000 if name == "driver" else 4000)
    assert all(v <= 16_000 for v in load.values())


def test_filters_from_the_per_pod_core_exclude_nodes_and_are_counted() -> None:
    nodes = fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=2)

    def only_leaf_2(member: Member, node: NodeState) -> Status:
        if node.labels["topos.io/leaf"] == "leaf-2":
            return Status()
        return Status.unresolvable("node(s) didn't match Pod's node affinity/selector")

    p = placed(place_members(members(2), nodes, eligible=only_leaf_2))
    assert p.leaves == ("leaf-2",)
    refused = place_members(members(3), nodes, eligible=only_leaf_2)
    assert isinstance(refused, Status)
    assert "0/4 nodes are available" in refused.message
    assert "2 node(s) didn't match Pod's node affinity/selector" in refused.message
    assert "3 pods need 24 nvidia.com/gpu" in refused.message


def test_does_not_fit_message_counts_insufficient_gpus() -> None:
    used = {n.name: 7 for n in fabric(spines=1, leaves_per_spine=1)}
    refused = place_members(members(2), fabric(spines=1, leaves_per_spine=1, used=used))
    assert isinstance(refused, Status)
    assert refused.code is Code.UNSCHEDULABLE
    assert "4 Insufficient nvidia.com/gpu" in refused.message


def test_unschedulable_nodes_get_nothing_and_inputs_are_not_changed() -> None:
    nodes = fabric(spines=1, leaves_per_spine=1)
    cordoned = [
        NodeState(
            name=n.name,
            labels=n.labels,
            allocatable=n.allocatable,
            free=n.free,
            schedulable=n.name != "l1-n1",
        )
        for n in nodes
    ]
    before = [dict(n.free) for n in cordoned]
    p = placed(place_members(members(3), cordoned))
    assert "l1-n1" not in p.nodes
    assert [dict(n.free) for n in cordoned] == before
    assert isinstance(place_members(members(4), cordoned), Status)


def test_bad_member_lists_are_refused_with_a_status() -> None:
    assert isinstance(place_members([], fabric()), Status)
    twice = [Member(name="a", requests={GPU: 1}), Member(name="a", requests={GPU: 1})]
    result = place_members(twice, fabric())
    assert isinstance(result, Status)
    assert "distinct" in result.message
