"""The tree from the levels a Kueue or KAI ``Topology`` already lists (broadest first), and the
lists that cannot be one tree, refused naming the level."""

from __future__ import annotations

import pytest

from coordinator.app.config.sections import GangsSection
from coordinator.core.domains.layout import DomainKeys, build_layout
from coordinator.core.domains.sources import keys_from_levels
from tests.support.nvl72 import racks

BLOCK, RACK, CLIQUE = (
    "cloud.provider.com/topology-block",
    "cloud.provider.com/topology-rack",
    ("nvidia.com/gpu.clique"),
)
HOST = "kubernetes.io/hostname"


def test_a_kueue_topology_with_a_clique_level_is_the_whole_tree() -> None:
    keys = keys_from_levels([BLOCK, RACK, CLIQUE, HOST])
    assert keys == DomainKeys(clique=CLIQUE, leaf=RACK, spine=BLOCK, zone="")


def test_levels_without_a_clique_read_no_cliques() -> None:
    assert keys_from_levels(["topology.kubernetes.io/zone", BLOCK, RACK]) == DomainKeys(
        clique="", leaf=RACK, spine=BLOCK, zone="topology.kubernetes.io/zone"
    )


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        ([RACK, RACK], f"level {RACK!r} is named twice"),
        ([HOST, RACK], f"level {HOST!r} must be the last (the narrowest)"),
        (
            ["a.io/z", "a.io/y", BLOCK, RACK],
            f"4 network levels (a.io/z, a.io/y, {BLOCK}, {RACK}); Topos has three above the "
            "clique (leaf, spine, zone): drop the broadest",
        ),
    ],
)
def test_a_list_that_is_no_tree_is_refused_naming_the_level(
    levels: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match="level") as caught:
        keys_from_levels(levels)
    assert str(caught.value) == message


def test_the_config_reads_the_levels_as_the_tree_the_planner_uses() -> None:
    section = GangsSection(topology_levels=(RACK, CLIQUE, HOST))
    keys = section.settings().keys
    labels = {RACK: "rack-7"}
    nodes = racks(1, labels={f"r1-t{i:02d}": labels for i in range(1, 19)})
    layout = build_layout(nodes, keys=keys)
    assert set(layout.leaves) == {"rack-7"}  # the rack label is the leaf
    assert len(layout.cliques) == 1
