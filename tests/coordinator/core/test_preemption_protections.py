"""Whole-gang preemption and its protections, on the pure victim search: a gang victim goes whole
or not at all, the fewest gangs are disturbed, a preemptor gang is planned in one decision, and a
pod under its minimum runtime (its annotation, its PriorityClass's, its namespace's) is no
victim — the answer says so when only such pods would make room."""

from __future__ import annotations

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.packing import Member
from coordinator.core.preemption.protections import (
    DurationRule,
    Protections,
    UnitCache,
    evictable_on,
    evictable_units,
)
from coordinator.core.preemption.victims import PreemptionPlan, RunningPod, select_victims
from coordinator.core.status import Status

NOW = 1_800_000_000.0


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


def pod(key: str, node: str, gpus: int, **kw: object) -> RunningPod:
    kw.setdefault("started_at", NOW - 3600)
    return RunningPod(key=key, node=node, requests={GPU: gpus}, **kw)  # type: ignore[arg-type]


def members(name: str, n: int, gpus: int) -> list[Member]:
    return [Member(name=f"ml/{name}-{i}", requests={GPU: gpus}) for i in range(n)]


def test_a_gang_victim_is_evicted_whole_even_where_half_of_it_would_do() -> None:
    # The preemptor needs 8 GPUs on one node: the gang's member on n1 alone would do, but the
    # gang spans n1 and n2 and goes whole.
    running = [pod("ml/g-0", "n1", 8, gang="ml/g"), pod("ml/g-1", "n2", 8, gang="ml/g")]
    plan = select_victims(
        members("hi", 1, 8), priority=10, nodes=nodes({"n1": 0, "n2": 0}), running=running
    )
    assert isinstance(plan, PreemptionPlan)
    assert plan.victim_pods == ("ml/g-0", "ml/g-1")
    assert plan.victims[0].gang


def test_a_gang_with_one_member_at_or_above_the_preemptor_is_not_evicted_at_all() -> None:
    running = [
        pod("ml/g-0", "n1", 8, gang="ml/g", priority=0),
        pod("ml/g-1", "n2", 8, gang="ml/g", priority=10),
    ]
    plan = select_victims(
        members("hi", 1, 8), priority=10, nodes=nodes({"n1": 0, "n2": 0}), running=running
    )
    assert isinstance(plan, Status)
    assert "would not make room" in plan.message


def test_one_large_gang_is_disturbed_rather_than_two_small_ones() -> None:
    # Two members of 4 GPUs: gangs a and b (2 pods each) free 4 GPUs on n1 and n2; gang c
    # (4 pods) frees all of n3. Smallest-first would take a and b: two gangs for one.
    running = [
        pod("ml/a-0", "n1", 2, gang="ml/a"),
        pod("ml/a-1", "n1", 2, gang="ml/a"),
        pod("ml/b-0", "n2", 2, gang="ml/b"),
        pod("ml/b-1", "n2", 2, gang="ml/b"),
        *[pod(f"ml/c-{i}", "n3", 2, gang="ml/c") for i in range(4)],
        pod("ml/keep-1", "n1", 4, priority=100),
        pod("ml/keep-2", "n2", 4, priority=100),
    ]
    plan = select_victims(
        members("hi", 2, 4),
        priority=50,
        nodes=nodes({"n1": 0, "n2": 0, "n3": 0}),
        running=running,
    )
    assert isinstance(plan, PreemptionPlan)
    assert [v.unit for v in plan.victims] == ["gang:ml/c"]


def test_lone_pods_are_evicted_before_a_gang_of_the_same_priority() -> None:
    running = [
        *[pod(f"ml/solo-{i}", "n1", 2) for i in range(4)],
        pod("ml/g-0", "n2", 4, gang="ml/g"),
        pod("ml/g-1", "n2", 4, gang="ml/g"),
    ]
    plan = select_victims(
        members("hi", 1, 8), priority=50, nodes=nodes({"n1": 0, "n2": 0}), running=running
    )
    assert isinstance(plan, PreemptionPlan)
    assert not any(v.gang for v in plan.victims)
    assert len(plan.victims) == 4


def test_a_preemptor_gang_is_planned_for_all_its_members_in_one_decision() -> None:
    running = [pod(f"ml/low-{i}", f"n{i}", 8) for i in range(1, 4)]
    plan = select_victims(
        members("hi", 3, 8),
        priority=50,
        nodes=nodes({"n1": 0, "n2": 0, "n3": 0}),
        running=running,
    )
    assert isinstance(plan, PreemptionPlan)
    assert sorted(m for m, _ in plan.nominated) == ["ml/hi-0", "ml/hi-1", "ml/hi-2"]
    assert len({n for _, n in plan.nominated}) == 3
    assert len(plan.victim_pods) == 3


PROTECT = Protections(
    min_runtime=DurationRule(
        default_s=0, priority_classes={"batch": 600.0}, namespaces={"research": 1800.0}
    )
)


def test_a_pod_under_its_minimum_runtime_is_spared_for_an_older_one() -> None:
    running = [
        pod("ml/young", "n1", 8, priority_class="batch", started_at=NOW - 60),
        pod("ml/old", "n2", 8, priority_class="batch", started_at=NOW - 3600),
    ]
    plan = select_victims(
        members("hi", 1, 8),
        priority=50,
        nodes=nodes({"n1": 0, "n2": 0}),
        running=running,
        now=NOW,
        protections=PROTECT,
    )
    assert isinstance(plan, PreemptionPlan)
    assert plan.victim_pods == ("ml/old",)


def test_when_only_protected_pods_would_make_room_the_answer_says_so() -> None:
    running = [pod("research/nb", "n1", 8, started_at=NOW - 120)]
    plan = select_victims(
        members("hi", 1, 8),
        priority=50,
        nodes=nodes({"n1": 0}),
        running=running,
        now=NOW,
        protections=PROTECT,
    )
    assert isinstance(plan, Status)
    assert "only evicting pods under their minimum runtime would make room" in plan.message
    assert "research/nb has run 2m of its minimum runtime 30m" in plan.message


def test_the_annotation_wins_over_the_class_and_protects_the_whole_gang() -> None:
    running = [
        pod("ml/g-0", "n1", 8, gang="ml/g", priority_class="batch", min_runtime_s=7200.0),
        pod("ml/g-1", "n2", 8, gang="ml/g", priority_class="batch"),
    ]
    found = evictable_units(running, below=50, now=NOW, protections=PROTECT)
    assert found.units == ()
    assert found.protected == {"gang:ml/g": "ml/g-0 has run 1h of its minimum runtime 2h"}
    # Without a clock no minimum runtime applies (callers that do not track time).
    assert [u.unit for u in evictable_units(running, below=50).units] == ["gang:ml/g"]


def test_a_pod_not_started_yet_has_run_nothing() -> None:
    running = [pod("ml/new", "n1", 8, priority_class="batch", started_at=None)]
    found = evictable_units(running, below=50, now=NOW, protections=PROTECT)
    assert "ml/new has not started yet" in found.protected["ml/new"]


def test_units_are_ordered_by_priority_then_gangs_pods_and_work_lost() -> None:
    running = [
        pod("ml/g-0", "n1", 1, gang="ml/g"),
        pod("ml/long", "n2", 4, started_at=NOW - 7200),
        pod("ml/short", "n3", 4, started_at=NOW - 60),
        pod("ml/lowest", "n4", 8, priority=-5, started_at=NOW - 99999),
    ]
    found = evictable_units(running, below=50, now=NOW)
    assert [u.unit for u in found.units] == ["ml/lowest", "ml/short", "ml/long", "gang:ml/g"]
    short = found.units[1]
    assert short.cost.gpu_seconds == 4 * 60


def test_units_kept_between_calls_are_those_a_fresh_grouping_gives() -> None:
    # The preemptor keeps the units of unchanged CPU-only lone pods between attempts: each call
    # must still answer as a fresh one — a pod changed (new object), a GPU pod whose work lost
    # grows with the time, a pod leaving, a gang — never a stale unit.
    cache = UnitCache()
    cpu = [RunningPod(key=f"ml/c{i}", node="n1", requests={"cpu": 900}) for i in range(3)]
    running = [*cpu, pod("ml/gpu", "n2", 2), pod("ml/g-0", "n3", 1, gang="ml/g")]

    def both(pods: list[RunningPod], now: float, **kw: object) -> list[object]:
        fresh = evictable_units(pods, below=50, now=now, **kw)  # type: ignore[arg-type]
        kept = evictable_units(pods, below=50, now=now, cache=cache, **kw)  # type: ignore[arg-type]
        assert kept == fresh
        return [(u.unit, u.priority, u.cost) for u in kept.units]

    first = both(running, NOW)
    assert both(running, NOW + 60) != first  # the GPU pod has run a minute more
    raised = RunningPod(key="ml/c1", node="n1", requests={"cpu": 900}, priority=40)
    changed = [cpu[0], raised, *running[2:]]
    assert [p for u, p, _ in both(changed, NOW) if u == "ml/c1"] == [40]  # not the kept unit
    assert "ml/c0" not in [u for u, _, _ in both(changed, NOW, leaving={"ml/c0"})]
    assert both(changed, NOW) == both(changed, NOW)


def test_one_nodes_units_kept_between_calls_answer_as_a_fresh_reading() -> None:
    """:func:`evictable_on` keeps a node's units only while its answer cannot change: another
    priority, other pods, other protections, a pod under its minimum runtime (which ends) or a
    GPU's work (which grows) are each read afresh."""
    cache = UnitCache()
    cpu = [
        RunningPod(key=f"ns/c{i}", node="n1", requests={"cpu": 900}, priority=i) for i in range(4)
    ]
    rules = Protections(min_runtime=DurationRule(default_s=600))

    def units(
        pods: list[RunningPod], below: int, now: float, protections: Protections
    ) -> list[str]:
        kept = evictable_on("n1", pods, below=below, now=now, protections=protections, cache=cache)
        fresh = evictable_units(pods, below=below, now=now, protections=protections)
        assert list(kept) == list(fresh.units)
        return [u.unit for u in kept]

    none = Protections()
    assert units(cpu, 3, NOW, none) == ["ns/c0", "ns/c1", "ns/c2"]
    assert units(cpu, 3, NOW, none) == ["ns/c0", "ns/c1", "ns/c2"]  # kept
    changed = [RunningPod(key="ns/c0", node="n1", requests={"cpu": 900}, priority=5), *cpu[1:]]
    assert units(changed, 3, NOW, none) == ["ns/c1", "ns/c2"]  # as many pods, one changed
    assert units(cpu, 1, NOW, none) == ["ns/c0"]  # another priority
    assert units(cpu[1:], 3, NOW, none) == ["ns/c1", "ns/c2"]  # other pods
    young = [RunningPod(key="ns/y", node="n1", requests={"cpu": 900}, started_at=NOW - 60)]
    assert units(young, 3, NOW, none) == ["ns/y"]
    assert units(young, 3, NOW, rules) == []  # under its minimum runtime ...
    assert units(young, 3, NOW + 600, rules) == ["ns/y"]  # ... then no longer
    gpu = [
        pod("ml/a", "n1", 1, started_at=NOW - 100),
        pod("ml/b", "n1", 2, started_at=NOW - 10),
    ]
    assert units(gpu, 3, NOW, none) == ["ml/b", "ml/a"]  # b has lost less work ...
    assert units(gpu, 3, NOW + 1000, none) == ["ml/a", "ml/b"]  # ... until it runs longer
