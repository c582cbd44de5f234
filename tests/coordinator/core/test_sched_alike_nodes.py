"""Nodes in the same scheduling state share node-local verdicts, placements and scores
(``Framework.alike``, keyed by ``NodeInfo.state_key``): the decisions, scores, failure messages
and per-node reasons stay exactly those of a framework that shares nothing, whatever happens to
the nodes between cycles — pods assumed and forgotten, pods bound by others, labels, taints and
cordons changed."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from common.model import NodeTopology
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure, ScheduleResult
from coordinator.core.plugins import placement
from coordinator.core.plugins.gpu import GpuTopology
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node, pcie8, plain_node, request, running, ws4

TAINT = Taint("dedicated", "infer", "NoSchedule")
HARDWARE: dict[str, Callable[[str], NodeTopology]] = {"h100": dgx_h100, "pcie8": pcie8, "ws4": ws4}


def node(name: str, kind: str, *, zone: str = "a", taints: tuple[Taint, ...] = ()) -> NodeInfo:
    """Few kinds, many nodes of each: alike until pods make them differ. Each has its own
    topology object (hostname and GPU UUIDs of its own), as the inventory builds them."""
    if kind == "plain":
        return plain_node(name, labels={"zone": zone}, taints=taints, cpu=32)
    return gpu_node(
        name, HARDWARE[kind](name), labels={"zone": zone}, taints=taints, cpu=96, memory_gib=512
    )


def cluster(rng: random.Random) -> list[NodeInfo]:
    kinds = ("h100", "pcie8", "ws4", "plain")
    return [node(f"n{i:02d}", rng.choice(kinds), zone=rng.choice("ab")) for i in range(16)]


def arrival(i: int, rng: random.Random) -> PodRequest:
    kind = rng.choice(("cpu", "gpu", "gpus", "share", "share", "share"))
    kw: dict[str, Any] = {"cpu": str(rng.choice((1, 4, 24))), "memory": f"{rng.choice((2, 60))}Gi"}
    if kind == "gpu":
        kw["gpus"] = 1
    elif kind == "gpus":
        kw["gpus"] = rng.choice((2, 4, 8))
    elif kind == "share":
        kw["annotations"] = {"topos.io/gpu-fraction": rng.choice(("0.25", "0.5", "0.7"))}
    if rng.random() < 0.25:
        kw["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    if rng.random() < 0.1:
        kw["node_selector"] = {"kubernetes.io/hostname": f"n{rng.randrange(16):02d}"}
    elif rng.random() < 0.1:
        kw["node_selector"] = {"zone": "a"}
    if rng.random() < 0.3:
        kw["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    return request(pod(f"p{i}", uid=f"uid-p{i}", **kw))


def outcome(result: ScheduleResult) -> object:
    if isinstance(result, Decision):
        return (result.node, result.placement, result.score, result.breakdown)
    assert isinstance(result, Failure)
    return (result.message, dict(result.statuses))


def change_a_node(rng: random.Random, snapshots: list[Snapshot]) -> None:
    """The same change to one node in every snapshot: a label, a taint or a cordon set or
    lifted, or a pod bound there by another scheduler."""
    name = f"n{rng.randrange(16):02d}"
    what = rng.choice(("zone", "taint", "cordon", "bound"))
    for snap in snapshots:
        old = snap.get(name)
        assert old is not None
        if what == "bound":
            other = running(pod(f"other-{name}-{len(old.pods)}", node=name, cpu="8"))
            snap.replace(old.rebuild((*old.pods, other)))
            continue
        labels = dict(old.labels)
        if what == "zone":
            labels["zone"] = "b" if labels.get("zone") == "a" else "a"
        snap.replace(
            NodeInfo.build(
                name,
                labels=labels,
                allocatable=old.allocatable,
                taints=() if old.taints or what != "taint" else (TAINT,),
                unschedulable=(not old.unschedulable) if what == "cordon" else old.unschedulable,
                topology=old.topology,
                pods=old.pods,
            )
        )


def first_difference(seed: int, pods: int = 150) -> int | None:
    """Replay random arrivals, departures and node changes on a framework sharing results
    between nodes alike and on one sharing nothing: the first pod decided differently (its
    decision, score, message or per-node reasons), or ``None``."""
    rng = random.Random(seed)
    nodes = cluster(rng)
    shared, alone = Snapshot(nodes), Snapshot([n.rebuild(n.pods) for n in nodes])
    fw, alone_fw = build_framework(), build_framework()
    assert fw.alike is not None
    alone_fw.alike = None  # shares nothing: every node judged by itself
    assumed: list[PodRequest] = []
    reused = 0  # node memo entries that stand on more than one node, summed over the cycles
    for i in range(pods):
        roll = rng.random()
        if roll < 0.1 and assumed:
            gone = assumed.pop(rng.randrange(len(assumed)))
            assert shared.forget(gone.key)
            assert alone.forget(gone.key)
        elif roll < 0.18:
            change_a_node(rng, [shared, alone])
        p = arrival(i, rng)
        got = schedule_one(p, shared, fw)
        want = schedule_one(p, alone, alone_fw)
        if outcome(got) != outcome(want):
            return i
        if isinstance(got, Decision):
            shared.assume(p, got.node, got.placement)
            alone.assume(p, got.node, got.placement)
            assumed.append(p)
        entries = [e for n in shared.nodes for e in n.memo.values()]
        reused += len(entries) - len({id(e) for e in entries})
    assert reused > 0  # results were shared: one entry standing on several nodes
    assert fw.alike.refusals  # refusals were kept per filter key
    return None


@pytest.mark.parametrize("seed", range(6))
def test_nodes_alike_share_results_and_decide_as_nodes_judged_alone(seed: int) -> None:
    assert first_difference(seed) is None


def test_a_filter_key_leaving_out_what_the_filter_reads_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The comparison above notices a refusal shared between nodes a filter does not read
    alike: GpuTopology keyed by the node's shape alone (not its free GPUs and shares)."""
    monkeypatch.setattr(GpuTopology, "filter_key", lambda self, node: node.shape_key)
    assert any(first_difference(seed) is not None for seed in range(6))


def test_a_node_alike_in_all_but_its_name_takes_the_results_of_the_first() -> None:
    first, second = node("a1", "h100"), node("a2", "h100")
    assert first.state_key is second.state_key  # hostnames and GPU UUIDs differ
    snapshot = Snapshot([first, second])
    fw = build_framework()
    share = request(pod("s", annotations={"topos.io/gpu-fraction": "0.5"}))
    decision = schedule_one(share, snapshot, fw)
    assert isinstance(decision, Decision)
    (entry_1,) = [v for v in first.memo.values() if hasattr(v, "verdict")]
    (entry_2,) = [v for v in second.memo.values() if hasattr(v, "verdict")]
    assert entry_1 is entry_2
    snapshot.assume(share, decision.node, decision.placement)
    changed = snapshot.get(decision.node)
    assert changed is not None
    assert changed.state_key is not first.state_key  # a pod placed: no longer alike


def test_a_node_differing_in_any_scheduling_input_is_not_alike() -> None:
    base = node("b1", "ws4")
    others = [
        node("b2", "ws4", zone="b"),
        node("b3", "ws4", taints=(TAINT,)),
        node("b4", "pcie8"),
        node("b5", "plain"),
        base.rebuild((running(pod("x", node="b1", cpu="1")),)),
    ]
    assert all(o.state_key is not base.state_key for o in others)
    assert node("b6", "ws4").state_key is base.state_key
    port = [{"containerPort": 80, "hostPort": 8080}]
    one = base.rebuild((running(pod("y", node="b1", cpu="1")),))
    one_binding_a_port = base.rebuild((running(pod("y", node="b1", cpu="1", ports=port)),))
    assert one.state_key is not one_binding_a_port.state_key


class _Forgetful(dict[object, object]):
    """A plan memo that keeps nothing: every plan made afresh."""

    def __setitem__(self, key: object, value: object) -> None:
        pass


@pytest.mark.parametrize("seed", range(4))
def test_a_share_goes_to_the_gpu_it_would_get_on_a_node_judged_afresh(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share's GPU is chosen by fragmentation growth, which reads the CPU and memory the node
    has left and the pod's own: nodes with the same GPUs in use but different CPU left may
    choose differently, and a plan remembered for one must not stand for the other."""
    rng = random.Random(seed)
    nodes = [node(f"w{i:02d}", rng.choice(("ws4", "pcie8"))) for i in range(12)]
    remembering, afresh = Snapshot(nodes), Snapshot([n.rebuild(n.pods) for n in nodes])
    fw, afresh_fw = build_framework(), build_framework()
    afresh_fw.alike = None
    for i in range(120):
        cpu = rng.choice((1, 2, 8, 30, 60))
        if rng.random() < 0.3:  # CPU-only: nodes with the same GPUs in use, less CPU left
            p = request(pod(f"c{i}", uid=f"uid-c{i}", cpu=str(cpu), memory="4Gi"))
        else:
            fraction = rng.choice(("0.1", "0.25", "0.3", "0.5", "0.6"))
            annotations = {"topos.io/gpu-fraction": fraction}
            p = request(pod(f"s{i}", uid=f"uid-s{i}", cpu=str(cpu), annotations=annotations))
        got = schedule_one(p, remembering, fw)
        with monkeypatch.context() as m:
            m.setattr(placement, "_PLANS", _Forgetful())
            want = schedule_one(p, afresh, afresh_fw)
        assert outcome(got) == outcome(want), f"pod {i}"
        if isinstance(got, Decision):
            remembering.assume(p, got.node, got.placement)
            afresh.assume(p, got.node, got.placement)
