"""Gangs mixing shares and whole GPUs (docs/sharing.md): the planner counts a member's share
against the GPUs it plans whole members on, so whole GPUs are never planned onto GPUs the gang's
own shares (or other pods' shares) take; it counts each share's places GPU by GPU; and recovery
from a failed GPU moves a share member as a share."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from coordinator.core.domains.capacity import GPU
from coordinator.core.gangs.cycle import (
    GangDecision,
    members_of,
    node_states,
    schedule_gang,
    with_share_milli,
)
from coordinator.core.gangs.plan import GangPlan, plan_gang
from coordinator.core.gangs.recovery import plan_recovery, share_room
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.sharing import parse_held
from coordinator.core.preemption.victims import RunningPod
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node, request, running

LABELS = {"topos.io/leaf": "leaf-a", "topos.io/spine": "spine-1"}


def member(name: str, **kw: Any) -> PodRequest:
    return request(pod(name, namespace="ml", gang=("mix", 3), cpu="1", memory="1Gi", **kw))


WHOLE = [member("w-0", gpus=1), member("w-1", gpus=1)]
HALF = member("s-0", annotations={"topos.io/gpu-fraction": "0.5"})


def node(name: str, *, busy: int, shared: str | None = None) -> NodeInfo:
    """A DGX H100 with GPUs 0..busy-1 held whole and, with ``shared``, GPU ``busy`` shared by a
    pod holding that fraction."""
    topo = dgx_h100(name)
    pods = [
        running(pod(f"{name}-b{i}", gpus=1, annotations={"topos.io/assigned-gpus": g.uuid}))
        for i, g in enumerate(topo.gpus[:busy])
    ]
    if shared is not None:
        ann = {
            "topos.io/assigned-gpus": topo.gpus[busy].uuid,
            "topos.io/gpu-fraction": shared,
            "topos.io/gpu-share": f"fraction={shared}",
        }
        pods.append(running(pod(f"{name}-s", annotations=ann)))
    return gpu_node(name, topo, labels=LABELS, pods=pods)


def plan(snapshot: Snapshot, pods: list[PodRequest]) -> GangPlan | Status:
    members = members_of(pods, snapshot)
    return plan_gang(members, with_share_milli(node_states(snapshot), snapshot))


def test_a_share_takes_a_gpu_whole_members_cannot_have() -> None:
    # Two free GPUs: the two whole members take both, the half has none left.
    refused = plan(Snapshot([node("a", busy=6)]), [*WHOLE, HALF])
    assert isinstance(refused, Status)
    assert "2500 thousandths of a GPU together" in (refused.detail or "")
    assert "have 2 nvidia.com/gpu, " in (refused.detail or "")
    assert isinstance(plan(Snapshot([node("a", busy=6)]), WHOLE), GangPlan)
    # Another pod's shared GPU with room for the half: all three fit.
    assert isinstance(plan(Snapshot([node("a", busy=5, shared="0.5")]), [*WHOLE, HALF]), GangPlan)
    # Its shared GPU without room for it: no.
    assert isinstance(plan(Snapshot([node("a", busy=5, shared="0.75")]), [*WHOLE, HALF]), Status)


def test_a_share_is_no_whole_gpu_even_as_a_replica() -> None:
    replica = member(
        "s-0", gpus=1, annotations={"topos.io/gpu-fraction": "0.5"}
    )  # time-slicing: nvidia.com/gpu 1 with the share
    (planned,) = members_of([replica], Snapshot([node("a", busy=0)]))
    assert planned.requests.get(GPU, 0) == 0


def test_the_gang_goes_where_its_shares_and_whole_gpus_both_fit() -> None:
    snapshot = Snapshot([node("a", busy=6), node("b", busy=5)])
    decided = schedule_gang([*WHOLE, HALF], snapshot, build_framework(), min_member=3)
    assert isinstance(decided, GangDecision), decided
    assert decided.rounds == 1  # "a" was never planned: its two GPUs cannot hold all three
    assert {d.node for d in decided.decisions} == {"b"}
    gpus = {d.pod_key: d.placement.gpus for d in decided.decisions}
    assert len({*gpus["ml/w-0"], *gpus["ml/w-1"], *gpus["ml/s-0"]}) == 3


def split(name: str) -> NodeInfo:
    """A DGX H100 with 1.4 GPUs of room for shares, none of it whole: 0.5 on GPU 0 and 0.3 on
    each of GPUs 1-3 (the rest held whole)."""
    topo = dgx_h100(name)
    pods = [
        running(
            pod(
                f"{name}-h{i}",
                annotations={
                    "topos.io/assigned-gpus": topo.gpus[i].uuid,
                    "topos.io/gpu-fraction": held,
                    "topos.io/gpu-share": f"fraction={held}",
                },
            )
        )
        for i, held in enumerate(("0.5", "0.7", "0.7", "0.7"))
    ]
    pods += [
        running(pod(f"{name}-w{i}", gpus=1, annotations={"topos.io/assigned-gpus": g.uuid}))
        for i, g in enumerate(topo.gpus[4:])
    ]
    return gpu_node(name, topo, labels=LABELS, pods=pods)


HALVES = [member(f"h-{i}", annotations={"topos.io/gpu-fraction": "0.5"}) for i in range(2)]


def test_room_split_over_gpus_too_small_for_a_share_is_no_place_for_it() -> None:
    # Each node has 1400 thousandths free but only one GPU a half fits: one half per node.
    # (Counted per node, both halves went to one node, the second was refused there, and so
    # the shape was refused node after node until the gang could not be placed at all.)
    snapshot = Snapshot([split("a"), split("b"), split("c")])
    decided = schedule_gang(HALVES, snapshot, build_framework(), min_member=2)
    assert isinstance(decided, GangDecision), decided
    assert decided.rounds == 1
    assert len({d.node for d in decided.decisions}) == 2
    assert all(d.placement.gpus == (0,) for d in decided.decisions)
    # One such node: the gang does not fit, and the refusal says what is missing.
    refused = schedule_gang(HALVES, Snapshot([split("a")]), build_framework(), min_member=2)
    assert isinstance(refused, Status)
    assert "need 2 cpu, 2Gi memory, 2 places on a GPU for a share of 0.5," in (refused.detail or "")
    assert "have 104 cpu, 2040Gi memory, 1 places on a GPU for a share of 0.5," in (
        refused.detail or ""
    )


@pytest.mark.parametrize("replica", [True, False], ids=["replica", "annotation-only"])
def test_a_share_member_on_a_failed_gpu_moves_as_a_share(replica: bool) -> None:
    """Gang ``train`` holds a half on GPU 0 of nodes a and b; a's GPU 0 fails. Every other GPU is
    held whole but c's GPU 0, where another pod holds a half: the mover goes there, the member on
    b stays. Counted as a whole GPU (its time-slicing replica) it had nowhere to go and the whole
    gang was released; counted as nothing it could be sent beside its sibling on b, whose GPU 0
    another half fills."""
    topos = {n: dgx_h100(n) for n in "abc"}
    dead = msgspec.structs.replace(topos["a"].gpus[0], healthy=False)
    topos["a"] = msgspec.structs.replace(topos["a"], gpus=(dead, *topos["a"].gpus[1:]))
    objs: dict[str, list[dict[str, Any]]] = {n: [] for n in "abc"}

    def half(name: str, node: str, **kw: Any) -> None:
        ann = {
            "topos.io/assigned-gpus": topos[node].gpus[0].uuid,
            "topos.io/gpu-fraction": "0.5",
            "topos.io/gpu-share": "fraction=0.5",
        }
        objs[node].append(pod(name, namespace="ml", gpus=int(replica), annotations=ann, **kw))

    for n, topo in topos.items():
        for i, g in enumerate(topo.gpus[1:], start=1):
            ann = {"topos.io/assigned-gpus": g.uuid}
            objs[n].append(pod(f"{n}-w{i}", namespace="ml", gpus=1, annotations=ann))
    half("train-0", "a", gang=("train", 2))
    half("train-1", "b", gang=("train", 2))
    half("other-b", "b")
    half("other-c", "c")
    snapshot = Snapshot(
        [gpu_node(n, topos[n], labels=LABELS, pods=[running(o) for o in objs[n]]) for n in "abc"]
    )
    pods = [
        RunningPod(
            key=f"ml/{o['metadata']['name']}",
            node=n,
            requests=dict(request(o).requests),
            gang="ml/train" if o["metadata"]["name"].startswith("train") else None,
            gpus=(o["metadata"]["annotations"]["topos.io/assigned-gpus"],),
            share=parse_held(o["metadata"]["annotations"].get("topos.io/gpu-share", "")),
        )
        for n in "abc"
        for o in objs[n]
    ]
    shares = {p.key: p.share for p in pods if p.share is not None}
    plan = plan_recovery(
        with_share_milli(node_states(snapshot), snapshot),
        pods,
        failed_gpus={"a": [topos["a"].gpus[0].uuid]},
        eligible=share_room(snapshot, shares),
    )
    (unit,) = plan.units
    assert (unit.mode, unit.moves, unit.kept) == (
        "partial",
        (("ml/train-0", "c"),),
        ("ml/train-1",),
    )
