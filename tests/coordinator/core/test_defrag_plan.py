"""Defragmentation's pure plan: for a gang that waits only because free GPUs are scattered, the
fewest, cheapest movable pods are moved, each fitting elsewhere; a bare pod is never moved (a
movable mark on one is refused, saying why); a PodDisruptionBudget or a minimum runtime that
forbids the moves is named; the cost model refuses moves that lose more work than the waiting
workload is worth."""

from __future__ import annotations

import pytest

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.packing import Member
from coordinator.core.podspec.selectors import LabelSelector
from coordinator.core.preemption.defrag import (
    DefragPlan,
    DefragSettings,
    movability,
    plan_compaction,
    plan_defrag,
)
from coordinator.core.preemption.model import DisruptionBudget, RunningPod
from coordinator.core.preemption.protections import DurationRule, Protections
from coordinator.core.status import Status

NOW = 1_800_000_000.0
SETTINGS = DefragSettings()


def nodes(free: dict[str, int]) -> list[NodeState]:
    return [
        NodeState(
            name=name,
            labels={"topos.io/leaf": "leaf-1", "topos.io/spine": "spine-1"},
            allocatable={GPU: 8},
            free={GPU: n},
        )
        for name, n in free.items()
    ]


def web(key: str, node: str, gpus: int = 1, **kw: object) -> RunningPod:
    kw.setdefault("started_at", NOW - 60)
    kw.setdefault("movable", True)
    kw.setdefault("labels", {"app": "web"})
    return RunningPod(key=key, node=node, requests={GPU: gpus}, **kw)  # type: ignore[arg-type]


def gang(n: int, gpus: int = 8) -> list[Member]:
    return [Member(name=f"ml/train-{i}", requests={GPU: gpus}) for i in range(n)]


def fragmented() -> tuple[list[NodeState], list[RunningPod]]:
    """Five 8-GPU nodes, four of them holding one 1-GPU pod each: 36 GPUs free, one whole node."""
    free = {"n1": 7, "n2": 7, "n3": 7, "n4": 7, "n5": 8}
    running = [web(f"ml/web-{i}", f"n{i}") for i in range(1, 5)]
    return nodes(free), running


def test_the_fewest_movable_pods_move_and_each_fits_elsewhere() -> None:
    free, running = fragmented()
    plan = plan_defrag(gang(4), priority=0, nodes=free, running=running, settings=SETTINGS, now=NOW)
    assert isinstance(plan, DefragPlan)
    assert len(plan.moved) == 3  # three nodes freed; the fourth takes the three moved pods
    emptied = {n for _, n in plan.plan.nominated}
    assert len(emptied) == 4
    assert "n5" in emptied
    stay = ({"n1", "n2", "n3", "n4"} - emptied).pop()
    assert dict(plan.destinations) == dict.fromkeys(plan.moved, stay)
    assert plan.lost_gpu_seconds == pytest.approx(3 * 60)
    assert "moving 3 pods" in plan.describe("gang:ml/train")


def test_the_cheapest_pods_move_first() -> None:
    # Same layout, but web-1 has run for a day: moving it loses the most work, so it stays.
    free, running = fragmented()
    running[0] = web("ml/web-1", "n1", started_at=NOW - 86400)
    plan = plan_defrag(
        gang(4),
        priority=0,
        nodes=free,
        running=running,
        settings=DefragSettings(max_loss_ratio=1.0),
        now=NOW,
    )
    assert isinstance(plan, DefragPlan)
    assert "ml/web-1" not in plan.moved
    assert set(plan.moved) == {"ml/web-2", "ml/web-3", "ml/web-4"}


def test_a_bare_pod_is_never_moved() -> None:
    free, running = fragmented()
    running[1] = web("ml/web-2", "n2", movable=False)
    running[2] = web("ml/web-3", "n3", movable=False)
    plan = plan_defrag(gang(4), priority=0, nodes=free, running=running, settings=SETTINGS, now=NOW)
    assert isinstance(plan, Status)
    assert "moving every pod would not make room" in plan.message


def test_movability_follows_the_owner_and_refuses_a_mark_on_a_bare_pod() -> None:
    assert movability("ReplicaSet", {}) is True
    assert movability("StatefulSet", {}) is True
    assert movability("ReplicaSet", {"topos.io/movable": "false"}) is False
    assert movability("Job", {}) is False  # unless its Job would recreate it without failing
    assert movability("Job", {"topos.io/movable": "true"}) is True
    assert movability("", {}) is False
    refused = movability("", {"topos.io/movable": "true"})
    assert isinstance(refused, str)
    assert 'metadata.annotations[topos.io/movable]: "true"' in refused
    assert "no controller owns" in refused


def test_a_disruption_budget_that_forbids_the_moves_is_named() -> None:
    free, running = fragmented()
    budget = DisruptionBudget(
        namespace="ml",
        name="web",
        selector=LabelSelector((("app", "web"),)),
        healthy=4,
        expected=4,
        min_available=4,
    )
    plan = plan_defrag(
        gang(4),
        priority=0,
        nodes=free,
        running=running,
        settings=SETTINGS,
        budgets=[budget],
        now=NOW,
    )
    assert isinstance(plan, Status)
    assert "only evictions the PodDisruptionBudget(s) ml/web forbid would make room" in (
        plan.message
    )


def test_a_minimum_runtime_is_respected() -> None:
    free, running = fragmented()
    rule = Protections(min_runtime=DurationRule(default_s=600))
    plan = plan_defrag(
        gang(4),
        priority=0,
        nodes=free,
        running=running,
        settings=SETTINGS,
        now=NOW,
        protections=rule,
    )
    assert isinstance(plan, Status)
    assert "only evicting pods under their minimum runtime would make room" in plan.message
    assert "ml/web-1 has run 1m of its minimum runtime 10m" in plan.message


def test_moved_pods_that_would_fit_nowhere_are_not_moved() -> None:
    # 8 GPUs free in all, but in holes of 4, 2 and 2: emptying n1 for an 8-GPU pod leaves its
    # 4-GPU pod only holes of 2.
    free = nodes({"n1": 4, "n2": 2, "n3": 2})
    running = [
        web("ml/big", "n1", gpus=4),
        web("ml/x", "n2", gpus=6, movable=False),
        web("ml/y", "n3", gpus=6, movable=False),
    ]
    plan = plan_defrag(gang(1), priority=0, nodes=free, running=running, settings=SETTINGS)
    assert isinstance(plan, Status)
    assert "ml/big would fit nowhere else once moved" in plan.message


def test_a_workload_short_of_gpus_in_all_is_not_planned_for() -> None:
    # 28 GPUs free for 32: its wait is one of capacity, not of scattered GPUs.
    free = nodes({"n1": 7, "n2": 7, "n3": 7, "n4": 7})
    running = [web(f"ml/web-{i}", f"n{i}") for i in range(1, 5)]
    plan = plan_defrag(gang(4), priority=0, nodes=free, running=running, settings=SETTINGS)
    assert isinstance(plan, Status)
    assert "too few GPUs are free for it anywhere" in plan.message


def test_the_cost_model_refuses_moves_losing_more_than_the_workload_is_worth() -> None:
    # Each pod has run a day: 3 × 86,400 GPU-seconds against 32 GPUs × 1 h × 5 %.
    free, running = fragmented()
    running = [web(p.key, p.node, started_at=NOW - 86400) for p in running]
    plan = plan_defrag(gang(4), priority=0, nodes=free, running=running, settings=SETTINGS, now=NOW)
    assert isinstance(plan, Status)
    assert "would lose 259200 GPU-seconds of work, more than the 5760" in plan.message
    # Even at maxLossRatio 1 (115,200 GPU-seconds) too much; a waiting workload 400 priority
    # above the pods may lose three times that (priorityStep 100: half more per step).
    lenient = DefragSettings(max_loss_ratio=1.0)
    same = plan_defrag(gang(4), priority=0, nodes=free, running=running, settings=lenient, now=NOW)
    assert isinstance(same, Status)
    higher = plan_defrag(
        gang(4), priority=400, nodes=free, running=running, settings=lenient, now=NOW
    )
    assert isinstance(higher, DefragPlan)
    assert higher.lost_gpu_seconds == pytest.approx(3 * 86400)


def test_pods_above_the_waiting_workload_are_never_moved() -> None:
    free, running = fragmented()
    running = [web(p.key, p.node, priority=10) for p in running]
    plan = plan_defrag(gang(4), priority=0, nodes=free, running=running, settings=SETTINGS, now=NOW)
    assert isinstance(plan, Status)


def test_a_bad_setting_names_its_key_and_value() -> None:
    with pytest.raises(ValueError, match="mode: 'sometimes'"):
        DefragSettings(mode="sometimes")
    with pytest.raises(ValueError, match="horizonSeconds: 0"):
        DefragSettings(horizon_s=0)


def test_compaction_empties_the_node_with_fewest_pods_onto_nodes_in_use() -> None:
    # n1 holds two pods, n2 one, n3 four GPUs of one pod; n4 is empty (never a destination).
    free = nodes({"n1": 6, "n2": 7, "n3": 4, "n4": 8})
    running = [
        web("ml/a", "n1"),
        web("ml/b", "n1"),
        web("ml/c", "n2"),
        web("ml/d", "n3", gpus=4),
    ]
    found = plan_compaction(free, running, max_pods=5, now=NOW)
    assert found is not None
    assert found.node == "n2"
    assert dict(found.destinations) == {"ml/c": "n3"}  # the tightest node in use
    assert "compaction frees n2 whole: moving 1 pod (ml/c)" in found.describe()


def test_compaction_moves_no_bare_pod_and_none_under_its_minimum_runtime() -> None:
    free = nodes({"n1": 7, "n2": 7})
    bare = [web("ml/a", "n1", movable=False), web("ml/b", "n2", movable=False)]
    assert plan_compaction(free, bare, max_pods=5, now=NOW) is None
    young = [web("ml/a", "n1"), web("ml/b", "n2")]
    rule = Protections(min_runtime=DurationRule(default_s=600))
    assert plan_compaction(free, young, max_pods=5, now=NOW, protections=rule) is None
    assert plan_compaction(free, young, max_pods=0, now=NOW) is None  # the budget is spent
    assert plan_compaction(free, young, max_pods=1, now=NOW) is not None
    # 60 GPU-seconds lost against 5 % of 8 GPUs × 1 h (1,440): allowed; a day's run is not.
    old = [web("ml/a", "n1", started_at=NOW - 86400), web("ml/b", "n2", started_at=NOW - 86400)]
    assert plan_compaction(free, old, max_pods=5, now=NOW) is None
    lenient = DefragSettings(max_loss_ratio=10.0)
    assert plan_compaction(free, old, max_pods=5, now=NOW, settings=lenient) is not None


def test_compaction_frees_no_tray_of_a_rack_that_stays_in_use() -> None:
    # Rack 1 (two 4-GPU trays): t1 holds one movable 1-GPU pod, t2 a gang's pod. An 8-GPU node
    # outside any clique holds two movable pods; another is busy (a destination). Emptying t1
    # moves fewest pods but leaves its rack in use, its 4 GPUs stranded there: hgx-1 is emptied.
    clique = "nvidia.com/gpu.clique"
    rack = {"topos.io/leaf": "leaf-1", clique: "5d0c9a3e-7f21-4c8b-a6e4-0b9f3d2c1e77.1"}
    trays = [
        NodeState(name=f"t{i}", labels=rack, allocatable={GPU: 4}, free={GPU: f})
        for i, f in ((1, 3), (2, 0))
    ]
    free = trays + nodes({"hgx-1": 6, "hgx-2": 4})
    running = [
        web("ml/a", "t1"),
        web("ml/train-0", "t2", gpus=4, movable=False, gang="ml/train"),
        web("ml/b", "hgx-1"),
        web("ml/c", "hgx-1"),
        web("ml/d", "hgx-2", gpus=4, movable=False),
    ]
    found = plan_compaction(free, running, max_pods=5, now=NOW)
    assert found is not None
    assert found.node == "hgx-1"
    # once the gang's tray is free too, emptying t1 leaves the whole rack idle: it goes first
    running[1] = web("ml/e", "hgx-2", movable=False)
    trays[1] = NodeState(name="t2", labels=rack, allocatable={GPU: 4}, free={GPU: 4})
    found = plan_compaction(trays + free[2:], running, max_pods=5, now=NOW)
    assert found is not None
    assert found.node == "t1"
