"""Properties that hold for any cluster state and any job: no node is ever over-committed, every
member is placed exactly once, and the reported tier matches where the members really are."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.domains.capacity import GPU
from coordinator.core.domains.layout import build_layout
from coordinator.core.domains.packing import Member, Placement
from coordinator.core.domains.select import place_members
from coordinator.core.domains.strategy import PlacementIntent, Strategy
from tests.support.domain_fabric import fabric

NODE_NAMES = [n.name for n in fabric()]


@settings(max_examples=60, deadline=None)
@given(
    used=st.dictionaries(st.sampled_from(NODE_NAMES), st.integers(0, 8), max_size=32),
    sizes=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=24),
    strategy=st.sampled_from(list(Strategy)),
    latency=st.booleans(),
)
def test_placements_are_sound(
    used: dict[str, int], sizes: list[int], strategy: Strategy, latency: bool
) -> None:
    nodes = fabric(used=used)
    members = [Member(name=f"m{i}", requests={GPU: g}) for i, g in enumerate(sizes)]
    result = place_members(
        members, nodes, intent=PlacementIntent(strategy=strategy, latency_sensitive=latency)
    )
    free_total = sum(n.gpus_free for n in nodes)
    if not isinstance(result, Placement):
        assert result.is_rejection
        return
    assert sum(sizes) <= free_total
    assert sorted(name for name, _ in result.assignments) == sorted(m.name for m in members)
    load: dict[str, int] = {}
    for (_, node), m in zip(result.assignments, members, strict=True):
        load[node] = load.get(node, 0) + m.requests[GPU]
    free = {n.name: n.gpus_free for n in nodes}
    assert all(load[n] <= free[n] for n in load)
    layout = build_layout(nodes)
    leaves = {layout.leaf_of[n] for n in load}
    spines = {layout.spine_of[n] for n in load}
    if result.tier == "node":
        assert len(load) == 1
    if result.tier == "leaf":
        assert len(leaves) == 1
    if result.tier == "spine" or latency:
        assert len(spines) == 1
    assert set(result.leaves) == leaves
