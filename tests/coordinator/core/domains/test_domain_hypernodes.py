"""Volcano HyperNodes read as Topos's tree: tiers become leaf, spine and zone; members chosen by
name, pattern or labels; what cannot be one tree (cycles, missing members, a node in two
HyperNodes of one tier) is named — HyperNode and member — and the rest of the tree is used."""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.core.domains.hypernodes import HyperNodeTree, build_tree, parse_hypernode

LEAF, SPINE, ZONE = "topos.io/leaf", "topos.io/spine", "topos.io/zone"


def hn(name: str, tier: object, *members: Mapping[str, object]) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"tier": tier, "members": list(members)}}


def node(name: str) -> dict[str, object]:
    return {"type": "Node", "selector": {"exactMatch": {"name": name}}}


def nodes_like(pattern: str) -> dict[str, object]:
    return {"type": "Node", "selector": {"regexMatch": {"pattern": pattern}}}


def nodes_labelled(**labels: str) -> dict[str, object]:
    return {"type": "Node", "selector": {"labelMatch": {"matchLabels": labels}}}


def child(name: str) -> dict[str, object]:
    return {"type": "HyperNode", "selector": {"exactMatch": {"name": name}}}


def tree(*objects: dict[str, object]) -> HyperNodeTree:
    parsed, problems = [], []
    for obj in objects:
        h, found = parse_hypernode(obj)
        problems.extend(found)
        if h is not None:
            parsed.append(h)
    return build_tree(parsed, problems)


def levels(t: HyperNodeTree, name: str, **labels: str) -> dict[str, str]:
    return t.levels_of(name, labels)[0]


def test_tiers_are_leaf_spine_and_zone_through_every_kind_of_member() -> None:
    t = tree(
        hn("rack-a", 1, nodes_like("^a-[0-9]+$")),
        hn("rack-b", 1, nodes_labelled(rack="b")),
        hn("rack-c", 1, node("c-1")),
        hn("block-1", 2, child("rack-a"), child("rack-b")),
        hn("block-2", 2, {"type": "HyperNode", "selector": {"regexMatch": {"pattern": "rack-c"}}}),
        hn("dc", 3, child("block-1"), child("block-2")),
    )
    assert t.problems == ()
    assert levels(t, "a-7") == {LEAF: "rack-a", SPINE: "block-1", ZONE: "dc"}
    assert levels(t, "b-1", rack="b") == {LEAF: "rack-b", SPINE: "block-1", ZONE: "dc"}
    assert levels(t, "c-1") == {LEAF: "rack-c", SPINE: "block-2", ZONE: "dc"}
    assert levels(t, "elsewhere") == {}  # in no HyperNode: no level


def test_mixed_depths_map_by_tier_not_by_depth() -> None:
    # a node held directly by a tier-2 HyperNode has a spine and no leaf
    t = tree(hn("rack-a", 1, node("a-1")), hn("block-1", 2, child("rack-a"), node("x-1")))
    assert levels(t, "a-1") == {LEAF: "rack-a", SPINE: "block-1"}
    assert levels(t, "x-1") == {SPINE: "block-1"}


def test_a_cycle_is_named_and_the_rest_of_the_tree_is_used() -> None:
    t = tree(
        hn("rack-a", 1, node("a-1")),
        hn("block-1", 2, child("rack-a"), child("block-2")),
        hn("block-2", 2, child("block-1")),
        hn("rack-b", 1, node("b-1")),
        hn("block-3", 2, child("rack-b")),
    )
    cycle = [p for p in t.problems if "cycle" in p]
    assert cycle == [
        "HyperNode block-2: members[0] selects HyperNode block-1, which leads back to block-2 "
        "(a cycle block-2 → block-1 → block-2): not used"
    ]
    assert levels(t, "b-1") == {LEAF: "rack-b", SPINE: "block-3"}
    assert levels(t, "a-1") == {LEAF: "rack-a", SPINE: "block-1"}


def test_a_longer_cycle_and_a_hypernode_selecting_itself() -> None:
    t = tree(
        hn("x", 3, child("y")),
        hn("y", 3, child("z")),
        hn("z", 3, child("x")),
        hn("self", 2, {"type": "HyperNode", "selector": {"regexMatch": {"pattern": "^self$"}}}),
    )
    assert any("(a cycle z → x → y → z)" in p and p.startswith("HyperNode z:") for p in t.problems)
    assert any(
        p.startswith("HyperNode self: members[0] selects HyperNode self itself") for p in t.problems
    )


def test_a_member_naming_a_missing_hypernode_is_named_and_skipped() -> None:
    t = tree(hn("rack-a", 1, node("a-1")), hn("block-1", 2, child("rack-a"), child("rack-zz")))
    assert t.problems == (
        "HyperNode block-1: members[1] names HyperNode rack-zz, which does not exist: not used",
    )
    assert levels(t, "a-1") == {LEAF: "rack-a", SPINE: "block-1"}


def test_a_node_in_two_hypernodes_of_one_tier_falls_back_to_their_parent() -> None:
    t = tree(
        hn("rack-a", 1, nodes_like("^n-")),
        hn("rack-b", 1, node("n-1")),
        hn("block-1", 2, child("rack-a"), child("rack-b")),
        hn("rack-c", 1, node("m-1")),
        hn("block-2", 2, child("rack-c")),
        hn("rack-d", 1, node("m-1")),
    )
    got, problem = t.levels_of("n-1", {})
    assert got == {SPINE: "block-1"}
    assert (
        problem
        == "node n-1 is a member of HyperNodes rack-a, rack-b (tier 1): read as in block-1, "
        "their parent"
    )
    got, problem = t.levels_of("m-1", {})
    assert got == {}
    assert (
        problem
        == "node m-1 is a member of HyperNodes rack-c, rack-d (tier 1): read as in none of them"
    )
    assert levels(t, "n-2") == {LEAF: "rack-a", SPINE: "block-1"}  # its rack-mates are untouched


def test_a_hypernode_in_two_parents_or_under_a_narrower_one_gets_no_parent() -> None:
    t = tree(
        hn("rack-a", 1, node("a-1")),
        hn("block-1", 2, child("rack-a")),
        hn("block-2", 2, child("rack-a")),
        hn("rack-b", 2, node("b-1")),
        hn("odd", 1, child("rack-b")),
    )
    assert (
        "HyperNode rack-a is a member of HyperNodes block-1, block-2 (tier 2): it is given no "
        "parent" in t.problems
    )
    assert (
        "HyperNode odd (tier 1): its member HyperNode rack-b has tier 2, not narrower: not used"
        in t.problems
    )
    assert levels(t, "a-1") == {LEAF: "rack-a"}
    assert levels(t, "b-1") == {SPINE: "rack-b"}


def test_bad_members_are_named_and_the_good_ones_kept() -> None:
    t = tree(
        hn(
            "rack-a",
            1,
            nodes_like("(unclosed"),
            {"type": "Pod", "selector": {"exactMatch": {"name": "x"}}},
            {"type": "Node", "selector": {}},
            {"type": "HyperNode", "selector": {"labelMatch": {"matchLabels": {"a": "b"}}}},
            {
                "type": "Node",
                "selector": {
                    "labelMatch": {"matchExpressions": [{"key": "k", "operator": "Near"}]}
                },
            },
            node("a-1"),
        ),
        hn("nameless-tier", "one", node("a-2")),
    )
    assert t.problems[0].startswith(
        "HyperNode rack-a: members[0].selector.regexMatch.pattern '(unclosed' is not a regular "
        "expression"
    )
    assert t.problems[1:5] == (
        "HyperNode rack-a: members[1].type 'Pod' is neither Node nor HyperNode: not used",
        "HyperNode rack-a: members[2].selector needs exactly one of exactMatch, regexMatch, "
        "labelMatch: not used",
        "HyperNode rack-a: members[3]: labelMatch selects only nodes, not HyperNodes: not used",
        "HyperNode rack-a: members[4].selector.labelMatch.matchExpressions[0].operator: "
        "unknown operator 'Near' (expected DoesNotExist, Exists, In, NotIn): not used",
    )
    assert (
        t.problems[5]
        == "HyperNode nameless-tier: spec.tier 'one' is not a tier (0 or more): ignored"
    )
    assert levels(t, "a-1") == {LEAF: "rack-a"}


def test_more_than_three_tiers_name_the_ones_left_out() -> None:
    t = tree(
        hn("r", 1, node("n")),
        hn("b", 2, child("r")),
        hn("d", 3, child("b")),
        hn("w", 4, child("d")),
    )
    assert t.problems == (
        "tiers 4 are not used: Topos has three levels above the node (leaf, spine, zone)",
    )
    assert levels(t, "n") == {LEAF: "r", SPINE: "b", ZONE: "d"}


def test_a_broad_pattern_a_tier_up_does_not_make_a_second_parent() -> None:
    everything = {"type": "HyperNode", "selector": {"regexMatch": {"pattern": "^(rack|block)-"}}}
    t = tree(
        hn("rack-a", 1, node("a-1")),
        hn("block-1", 2, child("rack-a")),
        hn("dc", 3, everything),
    )
    assert t.problems == ()
    assert levels(t, "a-1") == {LEAF: "rack-a", SPINE: "block-1", ZONE: "dc"}
