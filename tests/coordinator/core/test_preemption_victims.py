"""Preemption victim selection: fewest, lowest-priority victims, whole gangs as one victim,
``preemptionPolicy: Never`` and PodDisruptionBudgets honoured."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.packing import Member
from coordinator.core.podspec.selectors import LabelSelector
from coordinator.core.preemption.interpod import passes
from coordinator.core.preemption.protections import DurationRule, Protections, UnitCache
from coordinator.core.preemption.victims import (
    DisruptionBudget,
    PreemptionPlan,
    RunningPod,
    select_victims,
)
from coordinator.core.status import Code, Status


def nodes_with(running: list[RunningPod], count: int = 4) -> list[NodeState]:
    used: dict[str, int] = {}
    for pod in running:
        used[pod.node] = used.get(pod.node, 0) + pod.requests.get(GPU, 0)
    return [
        NodeState(
            name=f"n{i}",
            labels={"topos.io/leaf": "leaf-1", "topos.io/spine": "spine-1"},
            allocatable={GPU: 8},
            free={GPU: 8 - used.get(f"n{i}", 0)},
        )
        for i in range(1, count + 1)
    ]


def pod(key: str, node: str, gpus: int, priority: int = 0, **kw: object) -> RunningPod:
    return RunningPod(key=key, node=node, requests={GPU: gpus}, priority=priority, **kw)  # type: ignore[arg-type]


def gang(name: str, n: int, gpus: int = 8) -> list[Member]:
    return [Member(name=f"ml/{name}-{i}", requests={GPU: gpus}) for i in range(n)]


LOW_GANG = [
    pod("ml/low-0", "n1", 8, 0, gang="ml/low", labels={"app": "low"}),
    pod("ml/low-1", "n2", 8, 0, gang="ml/low", labels={"app": "low"}),
]


def test_high_priority_gang_preempts_the_low_priority_gang_as_a_whole() -> None:
    running = [*LOW_GANG, pod("ml/mid", "n3", 8, 500)]
    plan = select_victims(
        gang("high", 2), priority=1000, nodes=nodes_with(running), running=running
    )
    assert isinstance(plan, PreemptionPlan)
    assert [v.unit for v in plan.victims] == ["gang:ml/low"]
    assert plan.victim_pods == ("ml/low-0", "ml/low-1")
    assert {node for _, node in plan.nominated} <= {"n1", "n2", "n4"}
    assert "ml/mid" not in plan.victim_pods
    assert "gang:ml/low (priority 0, 2 pods)" in plan.describe("gang ml/high")


def test_a_victim_gang_is_never_left_half_running() -> None:
    running = [*LOW_GANG, pod("ml/mid", "n3", 8, 500), pod("ml/mid2", "n4", 8, 500)]
    plan = select_victims(gang("one", 1), priority=1000, nodes=nodes_with(running), running=running)
    assert isinstance(plan, PreemptionPlan)
    # one node is enough, but the gang's two pods go together
    assert plan.victim_pods == ("ml/low-0", "ml/low-1")


def test_fewest_victims_a_single_pod_before_a_gang_of_the_same_priority() -> None:
    running = [*LOW_GANG, pod("ml/filler", "n4", 8, 0), pod("ml/mid", "n3", 8, 500)]
    plan = select_victims(gang("one", 1), priority=1000, nodes=nodes_with(running), running=running)
    assert isinstance(plan, PreemptionPlan)
    assert plan.victim_pods == ("ml/filler",)
    assert plan.nominated == (("ml/one-0", "n4"),)


def test_unneeded_victims_are_spared() -> None:
    running = [pod(f"ml/p{i}", "n1", 2, 0) for i in range(4)]
    running += [pod(f"ml/q{i}", "n2", 2, 0) for i in range(4)]
    plan = select_victims(
        gang("four", 1, gpus=4), priority=10, nodes=nodes_with(running, 2), running=running
    )
    assert isinstance(plan, PreemptionPlan)
    assert len(plan.victim_pods) == 2
    assert len({v.nodes for v in plan.victims}) == 1


def test_disruption_budget_protects_a_pod_and_another_victim_is_chosen() -> None:
    running = [
        *LOW_GANG,
        pod("ml/mid", "n3", 8, 500),
        pod("ml/filler", "n4", 8, 0, labels={"app": "web"}),
    ]
    budget = DisruptionBudget(
        namespace="ml",
        name="web-pdb",
        selector=LabelSelector(match_labels=(("app", "web"),)),
        healthy=1,
        expected=1,
        min_available=1,
    )
    plan = select_victims(
        gang("one", 1),
        priority=1000,
        nodes=nodes_with(running),
        running=running,
        budgets=[budget],
    )
    assert isinstance(plan, PreemptionPlan)
    assert plan.victim_pods == ("ml/low-0", "ml/low-1")


def test_when_only_budget_protected_pods_would_help_the_budget_is_named() -> None:
    running = [*LOW_GANG, pod("ml/a", "n3", 8), pod("ml/b", "n4", 8)]
    budget = DisruptionBudget(
        namespace="ml",
        name="low-pdb",
        selector=LabelSelector(match_labels=(("app", "low"),)),
        healthy=2,
        expected=2,
        max_unavailable="0%",
    )
    result = select_victims(
        gang("big", 4), priority=1000, nodes=nodes_with(running), running=running, budgets=[budget]
    )
    assert isinstance(result, Status)
    assert "ml/low-pdb" in result.message


def test_preemption_policy_never_and_equal_priority() -> None:
    running = [*LOW_GANG, pod("ml/a", "n3", 8), pod("ml/b", "n4", 8)]
    never = select_victims(
        gang("x", 1),
        priority=1000,
        nodes=nodes_with(running),
        running=running,
        preemption_policy="Never",
    )
    assert isinstance(never, Status)
    assert never.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "Never" in never.message
    equal = select_victims(gang("x", 1), priority=0, nodes=nodes_with(running), running=running)
    assert isinstance(equal, Status)
    assert "would not make room" in equal.message


@pytest.mark.parametrize(
    ("kw", "allowed"),
    [
        ({"min_available": 3}, 2),
        ({"min_available": "50%"}, 2),  # ceil(2.5) = 3 of 5 healthy must stay
        ({"max_unavailable": 1}, 1),
        ({"max_unavailable": "40%"}, 2),
        ({"disruptions_allowed": 0, "min_available": 0}, 0),
    ],
)
def test_budget_arithmetic(kw: dict[str, object], allowed: int) -> None:
    budget = DisruptionBudget(
        namespace="ml",
        name="b",
        selector=LabelSelector(),
        healthy=5,
        expected=5,
        **kw,  # type: ignore[arg-type]
    )
    assert budget.allowed() == allowed


def test_garbage_budget_value_is_a_clear_error() -> None:
    budget = DisruptionBudget(
        namespace="ml", name="b", selector=LabelSelector(), healthy=1, expected=1, min_available="x"
    )
    with pytest.raises(ValueError, match="neither a count nor a percentage"):
        budget.allowed()


def _passes(node: str, gone: object) -> Status:
    return Status()


def test_a_lone_pod_takes_its_victims_from_one_node_the_cheapest() -> None:
    # Pods named so that the cluster-wide order interleaves nodes (n1, n2, n3, n1, ...): node by
    # node, the victims all sit where the pod is nominated, and n2's priority-0 pods win over
    # n1's and n3's priority-5 ones.
    running = [
        pod(f"ml/p{j * 3 + i}", f"n{i + 1}", 2, 0 if i == 1 else 5)
        for j in range(4)
        for i in range(3)
    ]
    plan = select_victims(
        [Member(name="ml/lone", requests={GPU: 6})],
        priority=100,
        nodes=nodes_with(running, count=3),
        running=running,
        recheck=_passes,
    )
    assert isinstance(plan, PreemptionPlan)
    assert plan.nominated == (("ml/lone", "n2"),)
    assert {v.nodes for v in plan.victims} == {("n2",)}
    assert len(plan.victim_pods) == 3  # 6 GPUs of 8 on n2: three of its four 2-GPU pods


def test_a_lone_pod_recheck_refusing_a_node_sends_it_elsewhere() -> None:
    running = [pod("ml/a", "n1", 8, 0), pod("ml/b", "n2", 8, 3)]

    def not_n1(node: str, gone: object) -> Status:
        return Status.unschedulable("spread") if node == "n1" else Status()

    plan = select_victims(
        [Member(name="ml/lone", requests={GPU: 8})],
        priority=100,
        nodes=nodes_with(running, count=2),
        running=running,
        recheck=not_n1,
    )
    assert isinstance(plan, PreemptionPlan)
    assert plan.victim_pods == ("ml/b",)
    refused = select_victims(
        [Member(name="ml/lone", requests={GPU: 8})],
        priority=100,
        nodes=nodes_with(running, count=2),
        running=running,
        recheck=lambda node, gone: Status.unschedulable("spread"),
    )
    assert isinstance(refused, Status)
    assert "on any one node" in (refused.detail or "")


def test_a_gang_that_needs_every_victim_is_not_planned_once_per_victim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """KAI's reclaim case: a gang as big as the cluster over one low-priority pod per node.
    Sparing each victim is ruled out by the free-GPU counts before the cluster is rebuilt
    without it for the gang, so the search builds it a few times (the prefix's binary search),
    not once per victim."""
    import coordinator.core.preemption.victims as victims

    count = 100
    running = [pod(f"fill/f-{i}", f"n{i}", 8, 0) for i in range(1, count + 1)]
    built = 0
    freed = victims._freed

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal built
        built += 1
        return freed(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(victims, "_freed", counting)
    plan = select_victims(
        gang("big", count), priority=1000, nodes=nodes_with(running, count), running=running
    )
    assert isinstance(plan, PreemptionPlan)
    assert len(plan.victim_pods) == count  # every filler goes: the gang needs every GPU
    assert {node for _, node in plan.nominated} == {f"n{i}" for i in range(1, count + 1)}
    assert built <= 12, built


def test_a_cpu_pod_preempts_as_upstreams_preemption_basic() -> None:
    # scheduler_perf's PreemptionBasic on three nodes of 4 CPUs, each holding four 900m pods:
    # a 3-CPU pod evicts three of one node's pods (400m free + 2.7 CPUs), never a cordoned
    # node's (n1 has the cheapest victims), never pods on other nodes, and its memory counts.
    def cpu_pod(key: str, node: str, milli: int, priority: int = 0) -> RunningPod:
        return RunningPod(
            key=key, node=node, requests={"cpu": milli, "memory": 1 << 29}, priority=priority
        )

    running = [
        cpu_pod(f"perf/n{n}-{i}", f"n{n}", 900, 0 if n == 1 else 5 - n + i % 2)
        for n in (1, 2, 3)
        for i in range(4)
    ]
    nodes = [
        NodeState(
            name=f"n{n}",
            allocatable={"cpu": 4000, "memory": 32 << 30},
            free={"cpu": 400, "memory": (32 << 30) - 4 * (1 << 29)},
            schedulable=n != 1,
        )
        for n in (1, 2, 3)
    ]
    high = [Member(name="perf/high", requests={"cpu": 3000, "memory": 1 << 29})]
    plan = select_victims(high, priority=10, nodes=nodes, running=running, recheck=_passes)
    assert isinstance(plan, PreemptionPlan)
    # n3's pods have priority 2 and 3, n2's 3 and 4: n3 wins; its priority-3 pod is spared
    # once (three victims are enough), so the victims are its two priority-2 and one priority-3.
    assert plan.nominated == (("perf/high", "n3"),)
    assert len(plan.victim_pods) == 3
    assert {v.nodes for v in plan.victims} == {("n3",)}
    assert sorted(v.priority for v in plan.victims) == [2, 2, 3]
    too_big = [Member(name="perf/huge", requests={"cpu": 3000, "memory": 40 << 30})]
    refused = select_victims(too_big, priority=10, nodes=nodes, running=running, recheck=_passes)
    assert isinstance(refused, Status)
    assert "on any one node" in (refused.detail or "")


def test_a_later_node_needing_fewer_victims_wins_the_cpu_search() -> None:
    # n1 and n3 each need three of their four 900m pods gone; n2 only its two 1800m ones. Nodes
    # that cannot beat the best so far are not worked out; n2, which can, is, and wins.
    def cpu_pod(key: str, node: str, milli: int) -> RunningPod:
        return RunningPod(key=key, node=node, requests={"cpu": milli})

    running = [
        *(cpu_pod(f"perf/n1-{i}", "n1", 900) for i in range(4)),
        *(cpu_pod(f"perf/n2-{i}", "n2", 1800) for i in range(2)),
        *(cpu_pod(f"perf/n3-{i}", "n3", 900) for i in range(4)),
    ]
    nodes = [
        NodeState(name=f"n{n}", allocatable={"cpu": 4000}, free={"cpu": 400}) for n in (1, 2, 3)
    ]
    high = [Member(name="perf/high", requests={"cpu": 3000})]
    plan = select_victims(high, priority=10, nodes=nodes, running=running, recheck=_passes)
    assert isinstance(plan, PreemptionPlan)
    assert plan.nominated == (("perf/high", "n2"),)
    assert plan.victim_pods == ("perf/n2-0", "perf/n2-1")


@pytest.mark.parametrize("seed", range(24))
def test_reading_the_candidates_node_by_node_plans_as_reading_them_all(seed: int) -> None:
    # A lone pod's victims read from the nodes visited alone (``on_node``, kept in a UnitCache
    # between calls) are the victims found from every running pod: the same plan, or the same
    # refusal and why, on random clusters of CPU nodes with GPU pods, pods under their minimum
    # runtime and cordoned nodes; asked again later, and for another priority, with the cache of
    # the first asking.
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(rng.randint(3, 150))]
    running = [
        RunningPod(
            key=f"ns/{node}-{i}",
            node=node,
            requests={
                "cpu": rng.choice((500, 900, 1800)),
                **({GPU: 1} if rng.random() < 0.2 else {}),
            },
            priority=rng.randint(0, 6),
            started_at=rng.uniform(0, 100),
            min_runtime_s=rng.choice((None, None, None, 30.0, 500.0)),
        )
        for node in names
        for i in range(rng.randint(0, 5))
    ]
    used: dict[str, int] = {}
    for p in running:
        used[p.node] = used.get(p.node, 0) + p.requests["cpu"]
    nodes = [
        NodeState(
            name=n,
            allocatable={"cpu": used.get(n, 0) + 400},
            free={"cpu": 400},  # the pod fits nowhere as things are
            schedulable=rng.random() > 0.1,
        )
        for n in names
    ]
    by_node: dict[str, list[RunningPod]] = {}
    for p in running:
        by_node.setdefault(p.node, []).append(p)
    protections = Protections(min_runtime=DurationRule(default_s=rng.choice((0.0, 20.0))))
    cache = UnitCache()
    member = [Member(name="ns/high", requests={"cpu": rng.choice((1000, 2000, 3000, 9000))})]
    first, second = rng.randint(4, 7), rng.randint(1, 3)
    roomier = [replace(n, free={"cpu": rng.choice((400, 1500, 2500))}) for n in nodes]
    other = [Member(name="ns/high", requests={"cpu": rng.choice((1000, 2000, 3000))})]
    askings = (
        (110.0, first, nodes, member),
        (400.0, first, nodes, member),  # later: the same answer, kept
        (400.0, second, nodes, member),  # another priority
        (400.0, second, roomier, member),  # the nodes changed
        (400.0, second, roomier, other),  # another pod
    )
    for now, priority, where, asking in askings:
        kw: dict[str, Any] = {
            "priority": priority,
            "nodes": where,
            "recheck": passes,
            "now": now,
            "protections": protections,
        }
        everything = select_victims(asking, running=running, **kw)
        lazy = select_victims(
            asking,
            running=lambda: running,
            on_node=lambda n: by_node.get(n, []),
            units=cache,
            **kw,
        )
        assert lazy == everything
