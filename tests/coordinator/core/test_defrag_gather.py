"""Gathering a gang into one NVLink clique: a gang the planner would split over cliques asks
for the whole gang inside one clique (``gather_intent``), and defragmentation then moves the
movable pods out of one clique for it — where, asked plainly, it moves nothing (the gang fits
split). A gang inside one clique already, on one node, or too large for any clique asks nothing."""

from __future__ import annotations

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.packing import Member
from coordinator.core.domains.slices import SliceSpec
from coordinator.core.domains.strategy import PlacementIntent
from coordinator.core.preemption.defrag import DefragPlan, DefragSettings, plan_defrag
from coordinator.core.preemption.gather import gather_intent
from coordinator.core.preemption.model import RunningPod

NOW = 1_800_000_000.0
CLIQUE = "nvidia.com/gpu.clique"
UUID = "5d0c9a3e-7f21-4c8b-a6e4-0b9f3d2c1e77"
KEYS = DomainKeys()


def tray(name: str, rack: int, free: int) -> NodeState:
    labels = {"topos.io/leaf": "leaf-1", "topos.io/spine": "spine-1", CLIQUE: f"{UUID}.{rack}"}
    return NodeState(name=name, labels=labels, allocatable={GPU: 4}, free={GPU: free})


def fleet() -> tuple[list[NodeState], list[RunningPod]]:
    """Two racks of four 4-GPU trays and one 8-GPU node outside any clique. Rack 1: two trays
    free, two holding a movable 1-GPU pod each. Rack 2: two trays free, two held by a pod no
    controller owns. The HGX node runs a 1-GPU pod (in use: moved pods may go there)."""
    nodes = [
        tray("r1-t1", 1, 4),
        tray("r1-t2", 1, 4),
        tray("r1-t3", 1, 3),
        tray("r1-t4", 1, 3),
        tray("r2-t1", 2, 4),
        tray("r2-t2", 2, 4),
        tray("r2-t3", 2, 0),
        tray("r2-t4", 2, 0),
        NodeState(
            name="hgx-1",
            labels={"topos.io/leaf": "leaf-1", "topos.io/spine": "spine-1"},
            allocatable={GPU: 8},
            free={GPU: 7},
        ),
    ]
    running = [
        RunningPod(
            key=f"ml/web-{i}", node=f"r1-t{i}", requests={GPU: 1}, movable=True, started_at=NOW
        )
        for i in (3, 4)
    ]
    running += [
        RunningPod(key=f"ml/bare-{i}", node=f"r2-t{i}", requests={GPU: 4}, started_at=NOW)
        for i in (3, 4)
    ]
    running.append(RunningPod(key="ml/svc", node="hgx-1", requests={GPU: 1}, started_at=NOW))
    return nodes, running


def gang() -> list[Member]:
    return [Member(name=f"ml/train-{i}", requests={GPU: 4}) for i in range(4)]


SPLIT = ("r1-t1", "r1-t2", "r2-t1", "r2-t2")  # where the planner puts it: two trays of each rack


def test_a_gang_split_over_cliques_asks_for_one_clique() -> None:
    nodes, _ = fleet()
    asked = gather_intent(SPLIT, 16, nodes, keys=KEYS)
    assert asked is not None
    assert asked.slices is not None
    assert asked.slices.gang_level == CLIQUE
    assert asked.slices.gang_required
    # the rest of the gang's intent is kept
    kept = gather_intent(SPLIT, 16, nodes, keys=KEYS, intent=PlacementIntent(gpu_count=16))
    assert kept is not None
    assert kept.gpu_count == 16


def test_a_gang_in_one_clique_on_one_node_or_too_large_asks_nothing() -> None:
    nodes, _ = fleet()
    assert gather_intent(("r1-t1", "r1-t2"), 8, nodes, keys=KEYS) is None  # one clique
    assert gather_intent(("hgx-1",), 8, nodes, keys=KEYS) is None  # one node
    assert gather_intent(SPLIT, 20, nodes, keys=KEYS) is None  # no clique has 20 GPUs
    assert gather_intent(SPLIT, 16, nodes, keys=DomainKeys(clique="")) is None  # no cliques read
    pinned = PlacementIntent(slices=SliceSpec(gang_level="topos.io/leaf"))
    assert gather_intent(SPLIT, 16, nodes, keys=KEYS, intent=pinned) is None  # it says where


def test_gathering_moves_the_movable_pods_out_of_one_clique() -> None:
    nodes, running = fleet()
    settings = DefragSettings()
    plain = plan_defrag(
        gang(), priority=0, nodes=nodes, running=running, settings=settings, keys=KEYS, now=NOW
    )
    assert not isinstance(plain, DefragPlan)  # it fits split: nothing to move for
    asked = gather_intent(SPLIT, 16, nodes, keys=KEYS)
    plan = plan_defrag(
        gang(),
        priority=0,
        nodes=nodes,
        running=running,
        settings=settings,
        keys=KEYS,
        now=NOW + 60,
        intent=asked,
    )
    assert isinstance(plan, DefragPlan), plan
    assert sorted(plan.moved) == ["ml/web-3", "ml/web-4"]
    assert {n for _, n in plan.plan.nominated} == {"r1-t1", "r1-t2", "r1-t3", "r1-t4"}
    # each moved pod fits elsewhere, outside the rack it leaves
    assert {p for p, _ in plan.destinations} == {"ml/web-3", "ml/web-4"}
    assert not {n for _, n in plan.destinations} & {"r1-t1", "r1-t2", "r1-t3", "r1-t4"}
