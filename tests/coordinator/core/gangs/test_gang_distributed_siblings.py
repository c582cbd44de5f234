"""A ``distributed`` group whose pods come one at a time (a Deployment's replicas, a rollout's
surge pod) still spreads: nodes holding placed pods of the same group are used last."""

from __future__ import annotations

from coordinator.core.domains.strategy import PlacementIntent, Strategy
from coordinator.core.gangs.cycle import GangDecision, schedule_gang
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import gang_members
from tests.support.sched_hw import dgx_h100, gpu_node, request

DISTRIBUTED = PlacementIntent(strategy=Strategy.DISTRIBUTED)


def _replicas(names: range, group: str = "inference") -> list[object]:
    members = gang_members(
        group,
        1,
        count=max(names) + 1,
        prefix="r",
        namespace="ml",
        gpus=1,
        annotations={"topos.io/placement": "distributed"},
    )
    return [request(members[i]) for i in names]


def test_replicas_placed_one_at_a_time_land_on_distinct_nodes() -> None:
    snapshot = Snapshot([gpu_node(f"n{i}", dgx_h100(f"n{i}")) for i in range(3)])
    framework = build_framework()
    nodes = []
    for i in range(3):
        (pod,) = _replicas(range(i, i + 1))
        decided = schedule_gang([pod], snapshot, framework, min_member=1, intent=DISTRIBUTED)
        assert isinstance(decided, GangDecision)
        (decision,) = decided.decisions
        snapshot.assume(pod, decision.node, decision.placement)
        nodes.append(decision.node)
    assert sorted(nodes) == ["n0", "n1", "n2"]


def test_another_groups_pods_do_not_push_a_replica_away() -> None:
    # n0 holds a replica of another group, n1 one of this group: the new one avoids n1 only
    snapshot = Snapshot([gpu_node(f"n{i}", dgx_h100(f"n{i}")) for i in range(2)])
    framework = build_framework()
    (other,) = _replicas(range(0, 1), group="other")
    (ours,) = _replicas(range(1, 2))
    (new,) = _replicas(range(2, 3))
    for pod, node in ((other, "n0"), (ours, "n1")):
        decided = schedule_gang([pod], snapshot, framework, min_member=1, intent=DISTRIBUTED)
        assert isinstance(decided, GangDecision)
        snapshot.assume(pod, node, decided.decisions[0].placement)
    decided = schedule_gang([new], snapshot, framework, min_member=1, intent=DISTRIBUTED)
    assert isinstance(decided, GangDecision)
    assert decided.decisions[0].node == "n0"


def test_a_replica_scheduled_on_its_own_avoids_its_siblings_nodes() -> None:
    # members beyond a running group's minimum go through the per-pod cycle (GroupSpread)
    from coordinator.core.framework.cycle import schedule_one
    from coordinator.core.framework.results import Decision

    snapshot = Snapshot([gpu_node(f"n{i}", dgx_h100(f"n{i}")) for i in range(3)])
    framework = build_framework()
    placed = []
    for pod in _replicas(range(3)):
        decision = schedule_one(pod, snapshot, framework)
        assert isinstance(decision, Decision)
        snapshot.assume(pod, decision.node, decision.placement)
        placed.append(decision.node)
    assert sorted(placed) == ["n0", "n1", "n2"]
    assert decision.breakdown.get("GroupSpread", 0) > 0
