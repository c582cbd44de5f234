"""Recovery planning after a GPU or node failure: affected gangs are re-placed as whole units,
with the fewest moves, never two gangs into the same room.

Fabric: 2 spines × 2 leaves × 4 nodes of 8 GPUs; leaf-1, leaf-2 under spine-1."""

from __future__ import annotations

from dataclasses import replace

from common.labels import GFD_GPU_CLIQUE
from coordinator.core.domains.capacity import GPU
from coordinator.core.domains.cliques import FABRIC_LABEL
from coordinator.core.domains.strategy import PlacementIntent, placement_intent
from coordinator.core.gangs.recovery import affected_pods, plan_recovery
from coordinator.core.preemption.victims import RunningPod
from tests.support.domain_fabric import fabric

UUID = "6f0e8a52-3b1c-4d2e-9a7f-0c1d2e3f4a5b"  # an NVLink cluster, as GFD labels it


def member(gang: str, i: int, node: str, priority: int = 0) -> RunningPod:
    return RunningPod(
        key=f"ml/{gang}-{i}",
        node=node,
        requests={GPU: 8},
        priority=priority,
        gang=f"ml/{gang}",
        gpus=tuple(f"{node}-GPU-{g}" for g in range(8)),
    )


def filler(node: str) -> RunningPod:
    return RunningPod(key=f"other/{node}", node=node, requests={GPU: 8}, priority=0)


def used_by(pods: list[RunningPod]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in pods:
        out[p.node] = out.get(p.node, 0) + p.requests[GPU]
    return out


def test_gpu_failure_moves_only_the_broken_member_inside_its_leaf() -> None:
    train = [member("train", i, f"l1-n{i + 1}") for i in range(3)]
    plan = plan_recovery(
        fabric(leaves_per_spine=2, used=used_by(train)),
        train,
        failed_gpus={"l1-n2": ["l1-n2-GPU-3"]},
    )
    (unit,) = plan.units
    assert unit.unit == "gang:ml/train"
    assert unit.mode == "partial"
    assert unit.affected == ("ml/train-1",)
    assert unit.moves == (("ml/train-1", "l1-n4"),)
    assert unit.kept == ("ml/train-0", "ml/train-2")
    assert plan.moves == 1


def test_a_gang_counted_by_gpu_count_moves_only_its_broken_member() -> None:
    # gpu-count=24 is the gang's total: the mover alone (8) is judged with the 16 that stay.
    train = [member("train", i, f"l1-n{i + 1}") for i in range(3)]
    intent = placement_intent({"topology.scheduler/gpu-count": "24"})
    assert isinstance(intent, PlacementIntent)
    plan = plan_recovery(
        fabric(leaves_per_spine=2, used=used_by(train)),
        train,
        failed_nodes=["l1-n2"],
        intents={"gang:ml/train": intent},
    )
    (unit,) = plan.units
    assert unit.mode == "partial", unit.message
    assert unit.evict == ("ml/train-1",)


def test_a_full_leaf_sends_the_mover_to_a_neighbour_leaf_of_the_same_spine() -> None:
    train = [member("train", i, f"l1-n{i + 1}") for i in range(3)]
    others = [filler("l1-n4")]
    running = train + others
    plan = plan_recovery(
        fabric(leaves_per_spine=2, used=used_by(running)), running, failed_nodes=["l1-n1"]
    )
    (unit,) = plan.units
    assert unit.mode == "partial"
    ((pod, node),) = unit.moves
    assert pod == "ml/train-0"
    assert node.startswith("l2-")  # leaf-2 is under spine-1 like the rest of the gang


def test_whole_gang_moves_when_its_spine_has_no_room_for_the_broken_part() -> None:
    train = [member("train", i, f"l1-n{i + 1}") for i in range(4)]
    others = [filler(f"l2-n{i}") for i in range(1, 5)]
    running = train + others
    plan = plan_recovery(
        fabric(leaves_per_spine=2, used=used_by(running)), running, failed_nodes=["l1-n1"]
    )
    (unit,) = plan.units
    # leaf-2 is full, so the lost member cannot join the others in spine-1; leaf-1 has only 3
    # healthy nodes for 4 members, so the whole gang moves together to one leaf of spine-2
    assert unit.mode == "whole"
    assert sorted(unit.evict) == [f"ml/train-{i}" for i in range(4)]
    assert {node for _, node in unit.moves} == {f"l3-n{i}" for i in range(1, 5)}


def test_unplaceable_gang_is_released_whole_never_left_half_running() -> None:
    train = [member("train", i, f"l1-n{i + 1}") for i in range(4)]
    others = [filler(f"l{leaf}-n{i}") for leaf in (2, 3, 4) for i in range(1, 5)]
    running = train + others
    plan = plan_recovery(
        fabric(leaves_per_spine=2, used=used_by(running)), running, failed_nodes=["l1-n1"]
    )
    (unit,) = plan.units
    assert unit.mode == "wait"
    assert unit.moves == ()
    assert sorted(unit.evict) == [f"ml/train-{i}" for i in range(4)]
    assert "waits whole" in unit.message


def test_two_broken_gangs_do_not_get_the_same_room_higher_priority_first() -> None:
    a = [member("a", 0, "l1-n1", priority=10), member("a", 1, "l1-n2", priority=10)]
    b = [member("b", 0, "l1-n3"), member("b", 1, "l2-n1")]
    others = [filler(f"l2-n{i}") for i in range(2, 5)] + [
        filler(f"l{leaf}-n{i}") for leaf in (3, 4) for i in range(1, 5)
    ]
    running = a + b + others
    plan = plan_recovery(
        fabric(leaves_per_spine=2, used=used_by(running)),
        running,
        failed_gpus={"l1-n1": ["l1-n1-GPU-0"], "l1-n3": ["l1-n3-GPU-5"]},
    )
    assert [u.unit for u in plan.units] == ["gang:ml/a", "gang:ml/b"]
    first, second = plan.units
    assert first.moves == (("ml/a-0", "l1-n4"),)
    # the only other free node is gone; b's broken member cannot move within spine-1
    assert second.mode in ("whole", "wait")
    assert "l1-n4" not in {n for _, n in second.moves}


def test_affected_pods_are_exactly_those_on_failed_hardware() -> None:
    p1 = RunningPod(key="ml/x", node="n1", requests={GPU: 1}, gpus=("GPU-a",))
    p2 = RunningPod(key="ml/y", node="n1", requests={GPU: 1}, gpus=("GPU-b",))
    p3 = RunningPod(key="ml/z", node="n2", requests={GPU: 1}, gpus=("GPU-c",))
    hit = affected_pods([p1, p2, p3], failed_gpus={"n1": ["GPU-b"]}, failed_nodes=["n2"])
    assert [p.key for p in hit] == ["ml/y", "ml/z"]
    assert plan_recovery([], [p1], failed_nodes=["n9"]).units == ()


def test_lone_pod_on_a_dead_node_is_replaced() -> None:
    lone = RunningPod(key="ml/solo", node="l1-n1", requests={GPU: 2}, gpus=("g",))
    plan = plan_recovery(
        fabric(leaves_per_spine=2, used={"l1-n1": 2}), [lone], failed_nodes=["l1-n1"]
    )
    (unit,) = plan.units
    assert unit.unit == "ml/solo"
    assert unit.mode == "whole"
    assert unit.moves[0][1] != "l1-n1"


def test_the_replacement_stays_in_the_gangs_nvlink_clique_and_the_message_says_where() -> None:
    # leaf-1's nodes split into two NVLink cliques (n1, n2 | n3, n4); the gang runs in clique A.
    nodes = fabric(leaves_per_spine=2, used={"l1-n1": 8, "l1-n2": 8})
    a, b = f"{UUID}.1", f"{UUID}.2"
    clique = {"l1-n1": a, "l1-n2": a, "l1-n3": b, "l1-n4": b, "l2-n1": a}
    nodes = [
        replace(n, labels={**n.labels, GFD_GPU_CLIQUE: clique[n.name]}) if n.name in clique else n
        for n in nodes
    ]
    train = [member("train", 0, "l1-n1"), member("train", 1, "l1-n2")]
    plan = plan_recovery(nodes, train, failed_gpus={"l1-n2": ["l1-n2-GPU-0"]})
    (unit,) = plan.units
    # the leaf has room on l1-n3, but l2-n1 is in the gang's own clique
    assert unit.moves == (("ml/train-1", "l2-n1"),)
    assert f"ml/train-1 goes to l2-n1, inside the gang's own NVLink clique {a}" in unit.message


def test_a_tray_out_of_its_clique_is_no_clique_replacement() -> None:
    # As above, but l2-n1's fabric is degraded: the layout takes it out of clique A, so the
    # replacement stays in the gang's leaf instead.
    nodes = fabric(leaves_per_spine=2, used={"l1-n1": 8, "l1-n2": 8})
    a, b = f"{UUID}.1", f"{UUID}.2"
    clique = {"l1-n1": a, "l1-n2": a, "l1-n3": b, "l1-n4": b, "l2-n1": a}
    nodes = [
        replace(n, labels={**n.labels, GFD_GPU_CLIQUE: clique[n.name]}) if n.name in clique else n
        for n in nodes
    ]
    nodes = [
        replace(n, labels={**n.labels, FABRIC_LABEL: "degraded"}) if n.name == "l2-n1" else n
        for n in nodes
    ]
    train = [member("train", 0, "l1-n1"), member("train", 1, "l1-n2")]
    plan = plan_recovery(nodes, train, failed_gpus={"l1-n2": ["l1-n2-GPU-0"]})
    (unit,) = plan.units
    (move,) = unit.moves
    assert move[1] in {"l1-n3", "l1-n4"}
    assert f"inside the gang's own NVLink clique {a}" not in unit.message
    assert "inside the gang's own leaf leaf-1" in unit.message


def test_without_a_clique_the_message_names_the_leaf() -> None:
    train = [member("train", i, f"l1-n{i + 1}") for i in range(3)]
    plan = plan_recovery(
        fabric(leaves_per_spine=2, used=used_by(train)),
        train,
        failed_gpus={"l1-n2": ["l1-n2-GPU-3"]},
    )
    (unit,) = plan.units
    assert "ml/train-1 goes to l1-n4, inside the gang's own leaf leaf-1" in unit.message
