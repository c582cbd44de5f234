"""The KAI-style consolidation baseline: for one waiting gang it moves running jobs in KAI's
victim order (lowest priority first, then the most recently started) until the gang fits and every
moved pod fits elsewhere — whatever the work lost, where Topos's cost model refuses."""

from __future__ import annotations

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.packing import Member
from coordinator.core.preemption.defrag import DefragPlan, DefragSettings, plan_defrag
from coordinator.core.preemption.model import RunningPod
from coordinator.sim.baselines.consolidation import kai_consolidation

NOW = 1_800_000_000.0
DAY = 86400.0
LABELS = {"topos.io/leaf": "leaf-1", "topos.io/spine": "spine-1"}


def nodes(free: dict[str, int]) -> list[NodeState]:
    return [
        NodeState(name=n, labels=LABELS, allocatable={GPU: 8}, free={GPU: f})
        for n, f in free.items()
    ]


def web(i: int, *, age_s: float, priority: int = 0) -> RunningPod:
    return RunningPod(
        key=f"ml/web-{i}",
        node=f"n{i}",
        requests={GPU: 1},
        priority=priority,
        started_at=NOW - age_s,
        movable=True,
    )


GANG = [Member(name=f"ml/train-{i}", requests={GPU: 8}) for i in range(4)]
FIVE = {"n1": 7, "n2": 7, "n3": 7, "n4": 7, "n5": 8}


def test_it_moves_what_topos_cost_model_refuses() -> None:
    running = [web(i, age_s=DAY) for i in range(1, 5)]  # each has run a day
    kw = {"priority": 0, "nodes": nodes(FIVE), "running": running, "now": NOW}
    topos = plan_defrag(GANG, settings=DefragSettings(), **kw)  # type: ignore[arg-type]
    assert not isinstance(topos, DefragPlan)
    assert "GPU-seconds of work" in topos.message
    kai = kai_consolidation(GANG, settings=DefragSettings(), **kw)  # type: ignore[arg-type]
    assert isinstance(kai, DefragPlan)
    assert len(kai.moved) == 3
    assert kai.lost_gpu_seconds == 3 * DAY


def test_victims_come_lowest_priority_first_then_newest() -> None:
    # web-1 is the newest but has the highest priority: it is the last KAI would take; of the
    # rest the newest two come first, then the oldest.
    running = [
        web(1, age_s=60, priority=5),
        web(2, age_s=3 * 3600),
        web(3, age_s=600),
        web(4, age_s=1200),
    ]
    kai = kai_consolidation(
        GANG,
        priority=10,
        nodes=nodes(FIVE),
        running=running,
        settings=DefragSettings(),
        now=NOW,
    )
    assert isinstance(kai, DefragPlan)
    assert set(kai.moved) == {"ml/web-2", "ml/web-3", "ml/web-4"}
    assert dict(kai.destinations) == dict.fromkeys(kai.moved, "n1")


def test_nothing_moves_when_the_moved_pods_would_fit_nowhere() -> None:
    running = [
        RunningPod(
            key=f"ml/web-{i}",
            node=f"n{i}",
            requests={GPU: 7},
            started_at=NOW - 60,
            movable=True,
        )
        for i in range(1, 5)
    ]
    kai = kai_consolidation(
        GANG[:1],
        priority=0,
        nodes=nodes({"n1": 1, "n2": 1, "n3": 1, "n4": 1, "n5": 4}),
        running=running,
        settings=DefragSettings(),
        now=NOW,
    )
    assert not isinstance(kai, DefragPlan)
