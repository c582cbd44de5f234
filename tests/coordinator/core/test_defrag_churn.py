"""Background compaction leaves young pods alone and, with ``compactRacks``, spends its moves on
racks: a pod that has run less than ``minPodAgeSeconds`` (5 minutes by default; one not started
yet has run 0 s) is not moved, nor is a gang one of whose pods is that young, on a node or in a
rack; with ``compactRacks`` on a fleet of racks, a node outside them (an HGX node) is not emptied
for itself — nor is anything when no rack can be emptied."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.preemption.defrag import MIN_POD_AGE_S, DefragSettings, plan_compaction
from coordinator.core.preemption.model import RunningPod
from tests.coordinator.core.test_defrag_racks import NOW, UUID, half_used

BACKGROUND = DefragSettings(mode="background")
RACKS = DefragSettings(mode="background", compact_racks=True)


def hgx(free: dict[str, int]) -> list[NodeState]:
    return [
        NodeState(
            name=name, labels={"topos.io/leaf": "leaf-9"}, allocatable={GPU: 8}, free={GPU: n}
        )
        for name, n in free.items()
    ]


def web(key: str, node: str, *, ran_s: float | None) -> RunningPod:
    started = None if ran_s is None else NOW - ran_s
    return RunningPod(key=key, node=node, requests={GPU: 1}, started_at=started, movable=True)


def test_a_pod_younger_than_the_minimum_age_is_not_moved() -> None:
    assert MIN_POD_AGE_S == 300
    free = hgx({"n1": 7, "n2": 7})
    # n1's pod ran 30 s (the cheapest to move), n2's 10 minutes
    running = [web("ml/a", "n1", ran_s=30), web("ml/b", "n2", ran_s=600)]
    anyage = DefragSettings(mode="background", min_pod_age_s=0)
    assert plan_compaction(free, running, max_pods=5, now=NOW, settings=anyage).node == "n1"  # type: ignore[union-attr]
    found = plan_compaction(free, running, max_pods=5, now=NOW, settings=BACKGROUND)
    assert found is not None
    assert found.node == "n2"  # the older pod moves instead, onto n1
    # a pod not started yet has run 0 s; two young pods: nothing moves
    unstarted = [web("ml/a", "n1", ran_s=None), running[1]]
    assert plan_compaction(free, unstarted, max_pods=5, now=NOW, settings=BACKGROUND).node == "n2"  # type: ignore[union-attr]
    both = [web("ml/a", "n1", ran_s=30), web("ml/b", "n2", ran_s=299)]
    assert plan_compaction(free, both, max_pods=5, now=NOW, settings=BACKGROUND) is None


def test_a_rack_holding_a_young_gang_is_not_emptied() -> None:
    # rack 1's gang ran 60 s (the cheapest to move), rack 2's 330 s
    nodes, running = half_used(young_ran_s=60)
    anyage = DefragSettings(mode="background", compact_racks=True, min_pod_age_s=0)
    found = plan_compaction(nodes, running, max_pods=10, settings=anyage, now=NOW)
    assert found is not None
    assert found.node == f"{UUID}.1"
    found = plan_compaction(nodes, running, max_pods=10, settings=RACKS, now=NOW)
    assert found is not None
    assert found.node == f"{UUID}.2"  # the older gang moves into rack 1
    # one young member is enough to keep its gang's rack
    old = [replace(p, started_at=NOW - 60) if p.key == "ml/old-1" else p for p in running]
    assert plan_compaction(nodes, old, max_pods=10, settings=RACKS, now=NOW) is None


def test_with_compact_racks_an_hgx_node_is_not_emptied_for_itself() -> None:
    # the racks: each half used by a gang that may not move (nothing recreates it); hgx-1 holds
    # one movable pod that fits on hgx-2
    nodes, gangs = half_used()
    pinned = [replace(p, movable=False) for p in gangs]
    free = [*nodes, *hgx({"hgx-1": 7, "hgx-2": 4})]
    running = [*pinned, web("ml/a", "hgx-1", ran_s=600), web("ml/b", "hgx-2", ran_s=600)]
    found = plan_compaction(free, running, max_pods=5, now=NOW, settings=BACKGROUND)
    assert found is not None
    assert found.node == "hgx-1"
    assert plan_compaction(free, running, max_pods=5, now=NOW, settings=RACKS) is None
    # without racks in the fleet, compactRacks changes nothing
    alone = hgx({"hgx-1": 7, "hgx-2": 4})
    found = plan_compaction(alone, running[-2:], max_pods=5, now=NOW, settings=RACKS)
    assert found is not None
    assert found.node == "hgx-1"


def test_a_negative_minimum_age_names_its_key_and_value() -> None:
    with pytest.raises(ValueError, match="minPodAgeSeconds: -1 is negative"):
        DefragSettings(min_pod_age_s=-1)
