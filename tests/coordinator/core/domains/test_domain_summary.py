"""Per-leaf / per-spine utilisation and fragmentation (the data of ``GET /v1/domains``), and the
layout read from node labels (natural leaf order, configurable keys, inconsistent labels)."""

from __future__ import annotations

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.layout import DomainKeys, build_layout, natural_key
from coordinator.core.domains.summary import summarize_domains, summary_to_builtins
from tests.support.domain_fabric import fabric


def test_leaf_order_is_natural() -> None:
    names = ["leaf-10", "leaf-2", "leaf-1"]
    assert sorted(names, key=natural_key) == ["leaf-1", "leaf-2", "leaf-10"]
    nodes = [
        NodeState(name=f"n{i}", labels={"topos.io/leaf": leaf, "topos.io/spine": "s"})
        for i, leaf in enumerate(names)
    ]
    assert build_layout(nodes).spines["s"].leaves == ("leaf-1", "leaf-2", "leaf-10")


def test_summary_counts_free_used_and_fragmentation() -> None:
    used = {"l1-n1": 3, "l1-n2": 8, "l2-n1": 1}
    summary = summarize_domains(fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=2, used=used))
    leaf1, leaf2 = summary.leaves
    assert (leaf1.name, leaf1.parent) == ("leaf-1", "spine-1")
    assert (leaf1.gpus_total, leaf1.gpus_used, leaf1.gpus_free) == (16, 11, 5)
    # l1-n1 is partly used (5 idle GPUs stranded); l1-n2 is full: no fragmentation there
    assert leaf1.fragmentation == 5
    assert leaf1.utilisation == round(11 / 16, 4)
    assert (leaf2.fragmentation, leaf2.nodes_idle) == (7, 1)
    spine = summary.spines[0]
    assert spine.leaves == ("leaf-1", "leaf-2")
    assert (spine.gpus_used, spine.fragmentation) == (12, 12)
    assert summary.cluster.gpus_free == 20
    data = summary_to_builtins(summary)
    assert data["cluster"]["fragmentation"] == 12  # type: ignore[index]


def test_unhealthy_gpus_and_cordoned_nodes() -> None:
    sick = NodeState(
        name="a",
        labels={"topos.io/leaf": "leaf-1"},
        allocatable={GPU: 8},
        free={GPU: 6},
        unhealthy_gpus=frozenset({"GPU-1", "GPU-2"}),
    )
    cordoned = NodeState(
        name="b",
        labels={"topos.io/leaf": "leaf-1"},
        allocatable={GPU: 8},
        free={GPU: 8},
        schedulable=False,
    )
    leaf = summarize_domains([sick, cordoned]).leaves[0]
    assert leaf.gpus_unhealthy == 2
    assert leaf.gpus_used == 0
    assert leaf.gpus_free == 6  # the cordoned node's GPUs are not offered
    assert leaf.nodes_schedulable == 1


def test_custom_keys_unlabelled_and_inconsistent_nodes() -> None:
    keys = DomainKeys(leaf="example.com/tor", spine="example.com/pod")
    nodes = [
        NodeState(name="a", labels={"example.com/tor": "t1", "example.com/pod": "p1"}),
        NodeState(name="b", labels={"example.com/tor": "t1", "example.com/pod": "p2"}),
        NodeState(name="c", labels={"topos.io/leaf": "ignored"}),
    ]
    summary = summarize_domains(nodes, keys=keys)
    assert [leaf.name for leaf in summary.leaves] == ["t1"]
    assert summary.unplaced_nodes == ("c",)
    assert summary.inconsistent_nodes == ("b",)
    assert summary.keys["leaf"] == "example.com/tor"
