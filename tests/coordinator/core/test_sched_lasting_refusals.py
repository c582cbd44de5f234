"""A refusal that adding pods cannot lift (CPU, GPUs, room on a GPU, ports, taints, labels) is
kept on the node an assume makes (``NodeInfo.refused``), so that node is not judged again for
that pod class: the decisions, failure messages and per-node reasons stay exactly those of a
scheduler judging every node afresh."""

from __future__ import annotations

import random
from typing import Any

import pytest

from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision, Failure, ScheduleResult
from coordinator.core.plugins.noderesources import NodeResourcesFit
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SUCCESS, Status
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node, pcie8, plain_node, request, ws4

TAINT = Taint("dedicated", "infer", "NoSchedule")


def cluster(rng: random.Random) -> list[NodeInfo]:
    nodes = []
    for i in range(10):
        name = f"n{i}"
        kind = rng.choice(("h100", "pcie8", "ws4", "plain"))
        labels = {"zone": rng.choice("ab")}
        taints = (TAINT,) if rng.random() < 0.2 else ()
        cpu = rng.choice((16, 32, 96))
        if kind == "plain":
            nodes.append(plain_node(name, labels=labels, taints=taints, cpu=cpu))
            continue
        topo = {"h100": dgx_h100, "pcie8": pcie8, "ws4": ws4}[kind](name)
        nodes.append(gpu_node(name, topo, labels=labels, taints=taints, cpu=cpu, memory_gib=256))
    return nodes


def arrival(i: int, rng: random.Random) -> PodRequest:
    kind = rng.choice(("cpu", "gpu", "gpus", "share", "share"))
    kw: dict[str, Any] = {"cpu": str(rng.choice((1, 4, 12))), "memory": f"{rng.choice((2, 30))}Gi"}
    if kind == "gpu":
        kw["gpus"] = 1
    elif kind == "gpus":
        kw["gpus"] = rng.choice((2, 4, 8))
    elif kind == "share":
        kw["annotations"] = {"topos.io/gpu-fraction": rng.choice(("0.25", "0.5", "0.7"))}
    if rng.random() < 0.15:
        kw["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    if rng.random() < 0.2:
        kw["node_selector"] = {"zone": "a"}
    if rng.random() < 0.3:
        kw["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    return request(pod(f"p{i}", uid=f"uid-p{i}", **kw))


def outcome(result: ScheduleResult) -> object:
    if isinstance(result, Decision):
        return (result.node, result.placement, result.device_ids)
    assert isinstance(result, Failure)
    return (result.message, dict(result.statuses))


@pytest.mark.parametrize("seed", range(6))
def test_kept_refusals_decide_and_explain_as_a_fresh_judgement(seed: int) -> None:
    rng = random.Random(seed)
    kept = Snapshot(cluster(rng))  # assumes carry refusals over
    fw, fresh_fw = build_framework(), build_framework()
    carried = 0
    for i in range(120):
        p = arrival(i, rng)
        carried += sum(1 for n in kept.nodes if n.refused - n.memo.keys())
        # The same cluster with every node built afresh: nothing remembered, nothing carried.
        fresh = Snapshot([n.rebuild(n.pods) for n in kept.nodes])
        got = schedule_one(p, kept, fw)
        want = schedule_one(p, fresh, fresh_fw)
        assert outcome(got) == outcome(want), f"pod {i}"
        if isinstance(got, Decision):
            kept.assume(p, got.node, got.placement)
    assert carried > 0  # refusals were carried over and used


def test_a_node_made_by_adding_pods_keeps_the_refusals_and_a_rebuild_does_not() -> None:
    node = gpu_node("n", ws4("n"), cpu=8)
    snapshot = Snapshot([node])
    big = request(pod("big", cpu="16"))
    assert isinstance(schedule_one(big, snapshot, build_framework()), Failure)
    node = snapshot.get("n")
    assert node is not None
    assert node.refused
    small = request(pod("small", cpu="1", uid="uid-small"))
    snapshot.assume(small, "n", Placement())
    after = snapshot.get("n")
    assert after is not None
    assert after is not node
    assert after.refused == node.refused
    # A node built from its pods again (pods may have gone) remembers nothing.
    assert not after.rebuild(after.pods).refused


class _NeedsCompany(Plugin):
    """A node-local filter whose refusal a pod added to the node lifts: it does not declare
    ``lasting_refusals``."""

    name = "NeedsCompany"
    node_local = True

    def filter(self, state: object, pod: PodRequest, node: NodeInfo) -> Status:
        if pod.labels.get("wants") == "company" and not node.pods:
            return Status.unschedulable("node(s) had no pods yet")
        return SUCCESS


def test_a_refusal_not_declared_lasting_is_judged_again_once_pods_are_added() -> None:
    config = SchedulerConfig()
    fw = Framework(config, [_NeedsCompany(), NodeResourcesFit()])
    snapshot = Snapshot([plain_node("n", cpu=8)])
    social = request(pod("social", labels={"wants": "company"}))
    first = schedule_one(social, snapshot, fw)
    assert isinstance(first, Failure)
    assert first.message == "0/1 nodes are available: 1 node(s) had no pods yet."
    snapshot.assume(request(pod("host", uid="uid-host")), "n", Placement())
    again = schedule_one(social, snapshot, fw)
    assert isinstance(again, Decision)
    assert again.node == "n"
