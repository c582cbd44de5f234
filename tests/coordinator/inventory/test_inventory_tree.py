"""A watched tree source in the inventory: each node's leaf, spine and zone are the source's word
(the Node's own values of those keys are not read, its other labels are kept); nodes whose levels
change are ``updated``; a named Topology that goes missing or cannot be one tree keeps the tree
it last gave, and ``tree_status`` says why."""

from __future__ import annotations

from coordinator.adapters.kube.tree import KUEUE_TOPOLOGIES, HyperNodes, NamedTopology
from coordinator.inventory.state import KubeNode
from coordinator.inventory.store import Inventory, InventoryEvent
from tests.support.clock import ManualClock

LEAF, SPINE, ZONE = "topos.io/leaf", "topos.io/spine", "topos.io/zone"
RACK, BLOCK = "example.com/rack", "example.com/block"


def inventory(*nodes: KubeNode) -> tuple[Inventory, list[InventoryEvent]]:
    inv = Inventory(clock=ManualClock())
    for n in nodes:
        inv.upsert_node(n)
    events: list[InventoryEvent] = []
    inv.subscribe(events.append)
    return inv, events


def labels(inv: Inventory, name: str) -> dict[str, str]:
    state = inv.node(name)
    assert state is not None
    return state.labels


def hypernode(name: str, tier: int, *members: tuple[str, str]) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {
            "tier": tier,
            "members": [{"type": t, "selector": {"exactMatch": {"name": n}}} for t, n in members],
        },
    }


def topology(name: str, *levels: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"levels": [{"nodeLabel": lv} for lv in levels]}}


def test_hypernodes_replace_the_nodes_own_leaf_and_keep_their_other_labels() -> None:
    own = {LEAF: "old-leaf", "topology.kubernetes.io/zone": "z1", "gpu": "h100"}
    inv, events = inventory(KubeNode(name="a-1", labels=own), KubeNode(name="a-2"))
    watch = HyperNodes(inv)
    watch.replace(
        [
            hypernode("rack-a", 1, ("Node", "a-1")),
            hypernode("block", 2, ("HyperNode", "rack-a"), ("HyperNode", "gone")),
        ]
    )
    assert labels(inv, "a-1") == {
        LEAF: "rack-a",
        SPINE: "block",
        "topology.kubernetes.io/zone": "z1",
        "gpu": "h100",
    }
    assert labels(inv, "a-2") == {}
    assert [e.node for e in events] == ["a-1"]  # a-2's levels did not change
    status = inv.tree_status()
    assert status.source == "volcano"
    assert status.problems == (
        "HyperNode block: members[1] names HyperNode gone, which does not exist: not used",
        "node a-1: topos.io/leaf is old-leaf on the Node, rack-a in the volcano tree: "
        "the tree's is used",
    )
    # a node that appears later is read against the tree in force
    inv.upsert_node(KubeNode(name="a-3", labels={LEAF: "mine"}))
    assert labels(inv, "a-3") == {}
    watch.apply("MODIFIED", hypernode("rack-a", 1, ("Node", "a-1"), ("Node", "a-3")))
    assert labels(inv, "a-3") == {LEAF: "rack-a", SPINE: "block"}
    before = len(events)
    status_only = {
        **hypernode("rack-a", 1, ("Node", "a-1"), ("Node", "a-3")),
        "status": {"nodeCount": 2},
    }
    watch.apply("MODIFIED", status_only)  # Volcano counting the nodes: nothing to read again
    assert len(events) == before
    watch.apply("DELETED", hypernode("block", 2))
    assert labels(inv, "a-1") == {
        LEAF: "rack-a",
        "topology.kubernetes.io/zone": "z1",
        "gpu": "h100",
    }
    assert inv.tree_status().problems == (
        "node a-1: topos.io/leaf is old-leaf on the Node, rack-a in the volcano tree: "
        "the tree's is used",
        "node a-3: topos.io/leaf is mine on the Node, rack-a in the volcano tree: "
        "the tree's is used",
    )


def test_a_node_in_two_racks_is_named_in_the_status() -> None:
    inv, _ = inventory(KubeNode(name="n-1"))
    HyperNodes(inv).replace(
        [hypernode("rack-a", 1, ("Node", "n-1")), hypernode("rack-b", 1, ("Node", "n-1"))]
    )
    assert labels(inv, "n-1") == {}
    assert inv.tree_status().problems == (
        "node n-1 is a member of HyperNodes rack-a, rack-b (tier 1): read as in none of them",
    )


def test_a_named_topology_is_followed_and_a_missing_one_keeps_the_last_tree() -> None:
    node = KubeNode(name="n-1", labels={RACK: "r7", BLOCK: "b2", LEAF: "stale"})
    inv, _ = inventory(node)
    watch = NamedTopology(inv, KUEUE_TOPOLOGIES, "default", "kueue")
    what = "Topology default (topologies.kueue.x-k8s.io)"
    assert labels(inv, "n-1") == {RACK: "r7", BLOCK: "b2"}  # nothing read yet: no tree
    assert inv.tree_status().problems == (f"{what}: not read yet",)
    watch.replace([])
    assert inv.tree_status().problems == (
        f"{what}: not found; no tree yet: nodes are in no leaf, spine or zone",
    )
    watch.apply("ADDED", topology("default", BLOCK, RACK, "kubernetes.io/hostname"))
    assert labels(inv, "n-1") == {RACK: "r7", BLOCK: "b2", LEAF: "r7", SPINE: "b2"}
    stale = f"node n-1: {LEAF} is stale on the Node, r7 in the kueue tree: the tree's is used"
    assert inv.tree_status().problems == (stale,)
    watch.apply("DELETED", topology("default"))
    assert labels(inv, "n-1")[LEAF] == "r7"  # kept
    assert inv.tree_status().problems == (
        f"{what}: deleted; the tree of its levels {BLOCK}, {RACK}, kubernetes.io/hostname is kept",
        stale,
    )
    watch.apply("ADDED", topology("default", RACK, "kubernetes.io/hostname", BLOCK))
    assert labels(inv, "n-1")[LEAF] == "r7"  # refused: still the last good tree
    assert inv.tree_status().problems == (
        f"{what}: spec.levels: level 'kubernetes.io/hostname' must be the last (the narrowest); "
        f"the tree of its levels {BLOCK}, {RACK}, kubernetes.io/hostname is kept",
        stale,
    )
    watch.apply("MODIFIED", topology("default", BLOCK))  # recreated with other levels
    assert labels(inv, "n-1") == {RACK: "r7", BLOCK: "b2", LEAF: "b2"}
    watch.apply("ADDED", topology("other", RACK))  # not the one named: ignored
    assert labels(inv, "n-1")[LEAF] == "b2"


def test_nodes_whose_own_levels_differ_from_the_tree_are_named_and_the_tree_wins() -> None:
    nodes = [KubeNode(name=f"n-{i:02d}", labels={LEAF: "old", SPINE: "sp"}) for i in range(12)]
    agree = KubeNode(name="ok", labels={LEAF: "rack-a"})
    outside = KubeNode(name="out", labels={LEAF: "old"})  # the tree puts it in no leaf
    inv, _ = inventory(*nodes, agree, outside)
    members = [("Node", n.name) for n in nodes]
    HyperNodes(inv).replace(
        [
            hypernode("rack-a", 1, *members, ("Node", "ok")),
            hypernode("blk", 2, ("HyperNode", "rack-a")),
        ]
    )
    assert labels(inv, "n-00") == {LEAF: "rack-a", SPINE: "blk"}  # the tree's, not the Node's
    assert labels(inv, "out") == {}
    problems = inv.tree_status().problems
    assert problems[0] == (
        "node n-00: topos.io/leaf is old on the Node, rack-a in the volcano tree; "
        "topos.io/spine is sp on the Node, blk in the volcano tree: the tree's is used"
    )
    assert [p.split(":")[0] for p in problems[:10]] == [f"node n-{i:02d}" for i in range(10)]
    assert problems[10:] == ("… and 2 more nodes whose own labels differ from the tree",)
    # the Node relabelled to agree: no longer named
    for n in nodes:
        inv.upsert_node(KubeNode(name=n.name, labels={LEAF: "rack-a", SPINE: "blk"}))
    assert inv.tree_status().problems == ()
