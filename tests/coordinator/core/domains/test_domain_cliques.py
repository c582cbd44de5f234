"""Multi-node gangs on NVL72 racks: one NVLink clique when it fits, else the fewest cliques of
one leaf; broken trays and bad clique labels fall back to the leaf without harming the rest.

Racks are 18 trays × 4 GPUs (``tests/support/nvl72.py``); members ask for a whole tray.
"""

from __future__ import annotations

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.layout import DomainKeys, build_layout
from coordinator.core.domains.packing import Member, Placement
from coordinator.core.domains.select import place_members
from coordinator.core.domains.slices import SliceSpec
from coordinator.core.domains.strategy import PlacementIntent, Strategy
from coordinator.core.domains.summary import summarize_domains
from coordinator.core.status import Status
from tests.support.nvl72 import CLUSTER_UUID, clique, racks, tray

CLIQUE_BLIND = DomainKeys(clique="")


def trays(n: int, gpus: int = 4) -> list[Member]:
    return [Member(name=f"w-{i:02d}", requests={GPU: gpus, "cpu": 8000}) for i in range(n)]


def placed(result: Placement | Status) -> Placement:
    assert isinstance(result, Placement), result.message  # type: ignore[union-attr]
    return result


def cliques_of(p: Placement, nodes: list[NodeState]) -> set[str]:
    by_name = {n.name: n for n in nodes}
    return {by_name[n].labels.get("nvidia.com/gpu.clique", "-") for n in p.nodes}


def test_an_18_tray_gang_takes_a_whole_other_rack_when_4_trays_of_the_first_are_taken() -> None:
    nodes = racks(2, used={tray(1, i): 4 for i in (2, 5, 9, 13)})
    p = placed(place_members(trays(18), nodes))
    assert p.tier == "clique"
    assert p.domain == clique(2)
    assert set(p.nodes) == {tray(2, i) for i in range(1, 19)}
    assert f"clique {clique(2)}" in p.explanation
    assert "inside one NVLink clique (nvidia.com/gpu.clique): 1 of 2 cliques could" in p.explanation
    # the same planner blind to cliques fills rack 1's 14 free trays first and spills over
    blind = placed(place_members(trays(18), nodes, keys=CLIQUE_BLIND))
    assert cliques_of(blind, nodes) == {clique(1), clique(2)}


def test_a_gang_that_fits_two_racks_takes_the_partly_used_one_and_keeps_the_whole_rack() -> None:
    nodes = racks(2, used={tray(2, i): 4 for i in range(1, 5)})
    p = placed(place_members(trays(14), nodes))
    assert p.domain == clique(2)  # 14 free trays: exactly full, rack 1 stays whole
    consolidated = PlacementIntent(strategy=Strategy.CONSOLIDATED)
    p = placed(place_members(trays(10), nodes, intent=consolidated))
    assert p.tier == "clique"


def test_a_gang_no_rack_holds_is_split_across_the_fewest_racks_of_one_leaf() -> None:
    # leaf-1: rack 1 (10 free trays), racks 2 and 3 whole; leaf-2: rack 4 whole
    nodes = racks(
        4,
        used={tray(1, i): 4 for i in range(1, 9)},
        leaf_of={1: "leaf-1", 2: "leaf-1", 3: "leaf-1", 4: "leaf-2"},
    )
    p = placed(place_members(trays(26), nodes))
    assert p.tier == "leaf"
    assert p.domain == "leaf-1"
    # rack 2 (18) and the tightest rack that completes it (rack 1, 10): rack 3 stays whole
    assert cliques_of(p, nodes) == {clique(1), clique(2)}
    assert "across 2 NVLink cliques of leaf leaf-1" in p.explanation
    assert "no one clique holds the group" in p.explanation


def test_two_racks_of_one_leaf_before_racks_of_two_leaves() -> None:
    nodes = racks(3, leaf_of={1: "leaf-1", 2: "leaf-2", 3: "leaf-2"})
    p = placed(place_members(trays(24), nodes))
    assert p.leaves == ("leaf-2",)
    assert cliques_of(p, nodes) == {clique(2), clique(3)}


def test_mixed_depths_racks_without_leaves_beside_hgx_nodes_with_leaves() -> None:
    nodes = racks(2, leaf_of={1: None, 2: None})
    hgx = [
        NodeState(
            name=f"hgx-{i}",
            labels={"topos.io/leaf": "leaf-9", "topos.io/spine": "spine-1"},
            allocatable={GPU: 8, "cpu": 64_000, "pods": 110},
            free={GPU: 8, "cpu": 64_000, "pods": 110},
            link="nvswitch",
        )
        for i in range(1, 5)
    ]
    cluster = [*nodes, *hgx]
    p = placed(place_members(trays(6), cluster))
    assert p.tier == "clique"
    p = placed(place_members(trays(2, gpus=8), cluster))
    assert p.leaves == ("leaf-9",)
    p = placed(place_members(trays(30), cluster))
    assert cliques_of(p, cluster) == {clique(1), clique(2)}
    assert "NVLink cliques of no leaf" in p.explanation


def test_cordoned_trays_count_out_of_their_rack() -> None:
    nodes = racks(2, cordoned=frozenset({tray(1, 1), tray(1, 2)}))
    p = placed(place_members(trays(17), nodes))
    assert p.domain == clique(2)
    p = placed(place_members(trays(16), nodes))
    assert p.domain == clique(1)
    assert not {tray(1, 1), tray(1, 2)} & set(p.nodes)


def test_a_tray_whose_fabric_is_degraded_is_avoided_and_named() -> None:
    nodes = racks(1, labels={tray(1, 3): {"topos.io/gpu.fabric": "degraded"}})
    p = placed(place_members(trays(17), nodes))
    assert p.tier == "clique"
    assert tray(1, 3) not in p.nodes
    layout = build_layout(nodes)
    assert layout.clique_problems[tray(1, 3)] == (
        f"NVLink fabric degraded (topos.io/gpu.fabric=degraded): out of clique {clique(1)}"
    )
    # still a node: a one-tray pod may use it
    assert tray(1, 3) not in layout.cliques[clique(1)].nodes


def test_a_group_held_to_one_clique_counts_only_its_trusted_trays_when_refused() -> None:
    # A ComputeDomain's gang is held to one clique (its level B): with tray 3 out of the rack,
    # 17 trays of 4 GPUs remain, and the refusal counts those, not the degraded tray's GPUs.
    nodes = racks(1, labels={tray(1, 3): {"topos.io/gpu.fabric": "degraded"}})
    held = SliceSpec(gang_level="nvidia.com/gpu.clique", gang_required=True)
    refused = place_members(trays(18), nodes, intent=PlacementIntent(slices=held))
    assert isinstance(refused, Status)
    assert "no nvidia.com/gpu.clique domain holds the whole group (18 pods, 72 nvidia.com/gpu)" in (
        refused.message
    )
    assert f"the roomiest, nvidia.com/gpu.clique={clique(1)}, has 68 nvidia.com/gpu free" in (
        refused.message
    )


def test_a_malformed_clique_value_is_named_and_the_tray_falls_back_to_its_leaf() -> None:
    nodes = racks(1, labels={tray(1, 7): {"nvidia.com/gpu.clique": "rack-1"}})
    layout = build_layout(nodes)
    assert layout.clique_problems == {
        tray(1, 7): "label nvidia.com/gpu.clique='rack-1' is not <clusterUUID>.<cliqueId>: "
        "placed as in no clique"
    }
    assert len(layout.cliques[clique(1)].nodes) == 17  # the others keep their rack
    p = placed(place_members(trays(17), nodes))
    assert p.tier == "clique"
    assert tray(1, 7) not in p.nodes
    p = placed(place_members(trays(18), nodes))  # the whole leaf still holds 18
    assert p.tier == "leaf"


def test_a_tray_reporting_a_clique_its_rack_mates_do_not_falls_back() -> None:
    odd = f"{CLUSTER_UUID}.99"
    nodes = racks(2, labels={tray(1, 4): {"nvidia.com/gpu.clique": odd}})
    layout = build_layout(nodes)
    assert odd not in layout.cliques
    assert layout.clique_problems[tray(1, 4)].startswith(f"reports clique {odd}, its rack-mates")
    assert len(layout.cliques[clique(2)].nodes) == 18


def test_domains_summary_lists_cliques_and_why_trays_are_out() -> None:
    nodes = racks(
        2,
        used={tray(1, 1): 4, tray(1, 2): 1},
        labels={tray(2, 1): {"nvidia.com/gpu.clique": "x"}},
    )
    summary = summarize_domains(nodes)
    by_name = {c.name: c for c in summary.cliques}
    assert by_name[clique(1)].nodes == 18
    assert by_name[clique(1)].parent == "leaf-1"
    assert by_name[clique(1)].gpus_free == 67
    assert by_name[clique(2)].nodes == 17
    assert summary.keys["clique"] == "nvidia.com/gpu.clique"
    assert summary.clique_problems == {
        tray(2, 1): "label nvidia.com/gpu.clique='x' is not <clusterUUID>.<cliqueId>: "
        "placed as in no clique"
    }
    # partly used cliques: idle GPUs there cannot take a whole-rack gang
    assert by_name[clique(1)].stranded == 67
    assert by_name[clique(2)].stranded == 0


def test_no_clique_labels_changes_nothing() -> None:
    nodes = racks(
        2, labels={tray(r, i): {"nvidia.com/gpu.clique": ""} for r in (1, 2) for i in range(1, 19)}
    )
    assert not build_layout(nodes).cliques
    p = placed(place_members(trays(18), nodes))
    assert p.tier == "leaf"
