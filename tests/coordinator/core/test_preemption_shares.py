"""Preemption with GPU shares (docs/sharing.md): a pod asking for part of a GPU preempts only pods
whose eviction makes room for it on one GPU; a GPU fractional pods share is freed for a whole-GPU
pod only when every holder goes. Snapshot, members and GPU holders are built as the engine builds
them (coordinator/engine/preemptor.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coordinator.core.domains.capacity import node_states
from coordinator.core.gangs.cycle import members_of
from coordinator.core.podspec.selectors import LabelSelector
from coordinator.core.podspec.sharing import parse_held
from coordinator.core.preemption.shares import gpu_holders
from coordinator.core.preemption.victims import (
    DisruptionBudget,
    PreemptionPlan,
    RunningPod,
    select_victims,
)
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status
from devcluster.pods import pod
from tests.support.sched_hw import gpu_node, pcie8, request, running

TOPO = pcie8("h", memory_mib=80 * 1024)
UUID = [g.uuid for g in TOPO.gpus]

# (name, GPU index, share ("0.5") or None for the whole GPU, priority, replica)
Holder = tuple[str, int, str | None, int]


def obj(name: str, gpu: int, share: str | None, priority: int, *, replica: bool) -> Any:
    ann = {"topos.io/assigned-gpus": UUID[gpu]}
    if share is not None:
        ann["topos.io/gpu-fraction"] = share
        ann["topos.io/gpu-share"] = f"fraction={share}"
    gpus = 1 if share is None or replica else 0
    return pod(name, gpus=gpus, priority=priority, annotations=ann, labels={"app": name})


def preempt(
    holders: Sequence[Holder],
    want: Any,
    *,
    replica: bool = False,
    budgets: Sequence[DisruptionBudget] = (),
) -> PreemptionPlan | Status:
    """``want`` (priority 1000) on node h, whose GPUs ``holders`` hold."""
    objs = [obj(n, g, s, p, replica=replica) for n, g, s, p in holders]
    snapshot = Snapshot([gpu_node("h", TOPO, pods=[running(o) for o in objs])])
    high = request(want)
    shares = {high.key: high.share} if high.share is not None else {}
    run = [
        RunningPod(
            key=f"default/{o['metadata']['name']}",
            node="h",
            requests=dict(request(o).requests),
            priority=o["spec"]["priority"],
            labels=o["metadata"]["labels"],
            share=parse_held(o["metadata"]["annotations"].get("topos.io/gpu-share", "")),
        )
        for o in objs
    ]
    return select_victims(
        members_of([high], snapshot),
        priority=1000,
        nodes=node_states(snapshot),
        running=run,
        budgets=budgets,
        shares=shares,
        gpus=list(gpu_holders(snapshot, every_gpu=bool(shares))),
    )


def share_pod(fraction: str | None = None, memory: str | None = None) -> Any:
    ann = {}
    if fraction:
        ann["topos.io/gpu-fraction"] = fraction
    if memory:
        ann["topos.io/gpu-memory"] = memory
    return pod("want", priority=1000, annotations=ann)


HIGH_WHOLE: list[Holder] = [(f"keep{i}", i, None, 2000) for i in range(6)]


def test_a_share_evicts_the_one_lower_priority_share_that_makes_room() -> None:
    holders = [
        *HIGH_WHOLE,
        ("half", 6, "0.5", 0),
        ("mid", 6, "0.5", 100),
        *[(f"a{i}", 7, "0.25", 0) for i in range(4)],
    ]
    plan = preempt(holders, share_pod("0.5"))
    assert isinstance(plan, PreemptionPlan), plan
    # One victim frees half of GPU 6; two quarters of GPU 7 would do it with two.
    assert plan.victim_pods == ("default/half",)
    assert plan.nominated == (("default/want", "h"),)
    # Its nomination holds the half on GPU 6, the one the victim frees (engine/nominations.py).
    assert plan.share_gpus == (("default/want", UUID[6]),)


def test_a_share_evicts_nothing_that_leaves_no_gpu_with_room() -> None:
    # Every GPU keeps a high-priority 0.75: evicting every low quarter leaves 0.25 per GPU.
    holders: list[Holder] = []
    for i in range(8):
        holders += [(f"keep{i}", i, "0.75", 2000), (f"low{i}", i, "0.25", 0)]
    refused = preempt(holders, share_pod("0.5"))
    assert isinstance(refused, Status)
    assert "would not make room" in (refused.detail or "")
    # A quarter fits there: one low quarter goes, not eight.
    plan = preempt(holders, share_pod("0.25"))
    assert isinstance(plan, PreemptionPlan), plan
    assert len(plan.victim_pods) == 1


def test_a_share_by_memory_counts_the_gpus_memory() -> None:
    # GPU 7: a low 0.25 (20Gi) and a high 0.5 (40Gi); 30Gi fits once the quarter goes.
    holders = [*HIGH_WHOLE, ("keep6", 6, None, 2000)]
    holders += [("low", 7, "0.25", 0), ("top", 7, "0.5", 2000)]
    plan = preempt(holders, share_pod(memory="30Gi"))
    assert isinstance(plan, PreemptionPlan), plan
    assert plan.victim_pods == ("default/low",)
    refused = preempt(holders, share_pod(memory="50Gi"))
    assert isinstance(refused, Status)


def test_a_share_takes_a_gpu_held_whole_by_a_lower_priority_pod() -> None:
    holders = [
        *HIGH_WHOLE,
        ("whole", 6, None, 0),
        ("keep7", 7, "0.75", 2000),
        ("low7", 7, "0.25", 500),
    ]
    plan = preempt(holders, share_pod("0.5"))
    assert isinstance(plan, PreemptionPlan), plan
    # The whole GPU's holder (priority 0) goes before the quarter (500), which would not do.
    assert plan.victim_pods == ("default/whole",)
    assert plan.share_gpus == (("default/want", UUID[6]),)


def test_a_share_respects_disruption_budgets() -> None:
    holders = [*HIGH_WHOLE, ("half", 6, "0.5", 0), ("keep6", 6, "0.5", 2000)]
    holders += [(f"q{i}", 7, "0.25", 0) for i in range(4)]
    guard = DisruptionBudget(
        namespace="default",
        name="guard",
        selector=LabelSelector((("app", "half"),)),
        healthy=1,
        expected=1,
        disruptions_allowed=0,
    )
    plan = preempt(holders, share_pod("0.5"), budgets=[guard])
    assert isinstance(plan, PreemptionPlan), plan
    assert plan.victim_pods == ("default/q0", "default/q1")


# --- whole-GPU preemptors and the GPUs shares hold ---------------------------------------------


def test_evicting_one_holder_of_a_shared_gpu_frees_no_gpu() -> None:
    # GPU 6 is shared by a low and a high replica; GPU 7 is held whole by a low pod.
    holders = [
        *HIGH_WHOLE,
        ("a-share", 6, "0.5", 0),
        ("a-keep", 6, "0.5", 2000),
        ("b-whole", 7, None, 0),
    ]
    plan = preempt(holders, pod("want", gpus=1, priority=1000), replica=True)
    assert isinstance(plan, PreemptionPlan), plan
    assert plan.victim_pods == ("default/b-whole",)
    # Two GPUs: the shared one is never free while its high-priority holder stays.
    refused = preempt(holders, pod("want", gpus=2, priority=1000), replica=True)
    assert isinstance(refused, Status)


def test_a_shared_gpu_all_of_whose_holders_go_is_freed() -> None:
    holders = [*HIGH_WHOLE, ("keep6", 6, None, 2000)]
    holders += [("s1", 7, "0.5", 0), ("s2", 7, "0.5", 0)]
    plan = preempt(holders, pod("want", gpus=1, priority=1000))
    assert isinstance(plan, PreemptionPlan), plan
    assert plan.victim_pods == ("default/s1", "default/s2")
    plan = preempt(holders, pod("want", gpus=1, priority=1000), replica=True)
    assert isinstance(plan, PreemptionPlan), plan
    assert plan.victim_pods == ("default/s1", "default/s2")


def test_a_gang_of_halves_counts_the_places_its_victims_free_gpu_by_gpu() -> None:
    """Evicting the low shares of GPUs 0-2 frees 0.5 + 0.4 + 0.4 of a GPU: 1.3 GPUs, room for
    one half only. Two halves of a gang evict nobody (they once evicted all three, and the
    second half still had no GPU)."""
    holders: list[Holder] = [
        ("keep0", 0, "0.5", 2000),
        ("low0", 0, "0.5", 0),
        ("keep1", 1, "0.6", 2000),
        ("low1", 1, "0.4", 0),
        ("keep2", 2, "0.6", 2000),
        ("low2", 2, "0.4", 0),
        *[(f"keep{i}", i, None, 2000) for i in range(3, 8)],
    ]
    objs = [obj(n, g, s, p, replica=False) for n, g, s, p in holders]
    snapshot = Snapshot([gpu_node("h", TOPO, pods=[running(o) for o in objs])])
    gang = [
        request(pod(f"g-{k}", priority=1000, annotations={"topos.io/gpu-fraction": "0.5"}))
        for k in range(2)
    ]
    run = [
        RunningPod(
            key=f"default/{o['metadata']['name']}",
            node="h",
            requests=dict(request(o).requests),
            priority=o["spec"]["priority"],
            share=parse_held(o["metadata"]["annotations"].get("topos.io/gpu-share", "")),
        )
        for o in objs
    ]

    def plan(members: list[Any]) -> PreemptionPlan | Status:
        return select_victims(
            members_of(members, snapshot),
            priority=1000,
            nodes=node_states(snapshot),
            running=run,
            shares={m.key: m.share for m in members if m.share is not None},
            gpus=list(gpu_holders(snapshot, every_gpu=True)),
        )

    refused = plan(gang)
    assert isinstance(refused, Status), refused
    assert "would not make room" in (refused.detail or "")
    one = plan(gang[:1])  # a single half: the low half of GPU 0 goes, on it
    assert isinstance(one, PreemptionPlan), one
    assert one.victim_pods == ("default/low0",)
    assert one.share_gpus == (("default/g-0", UUID[0]),)
