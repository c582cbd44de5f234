"""A gang decided on the scheduling core's snapshot: the core's filters veto planned nodes and the
gang is re-planned around them; the snapshot passed in is never changed."""

from __future__ import annotations

from typing import Any

from coordinator.core.framework.status import Status
from coordinator.core.gangs.cycle import GangDecision, node_state, schedule_gang
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot


def worker(i: int, gpus: int = 8) -> PodRequest:
    pod: dict[str, Any] = {
        "metadata": {
            "name": f"w-{i}",
            "namespace": "ml",
            "labels": {"topos.io/gang": "train", "topos.io/gang-min": "2"},
        },
        "spec": {
            "schedulerName": "topos",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
    }
    parsed = parse_pod(pod)
    assert isinstance(parsed, PodRequest)
    return parsed


def node(name: str, leaf: str, **kw: Any) -> NodeInfo:
    return NodeInfo.build(
        name,
        labels={"topos.io/leaf": leaf, "topos.io/spine": "spine-1"},
        allocatable={"nvidia.com/gpu": 8, "cpu": 64_000, "memory": 2**38, "pods": 110},
        **kw,
    )


def test_a_tainted_node_is_vetoed_by_the_core_and_the_gang_is_replanned() -> None:
    snapshot = Snapshot(
        [
            node("a1", "leaf-a", taints=[Taint("dedicated", "infer", "NoSchedule")]),
            node("a2", "leaf-a"),
            node("b1", "leaf-b"),
            node("b2", "leaf-b"),
        ]
    )
    decided = schedule_gang([worker(0), worker(1)], snapshot, build_framework(), min_member=2)
    assert isinstance(decided, GangDecision)
    assert decided.rounds == 1  # the core's verdict per node is known before planning
    assert {d.node for d in decided.decisions} == {"b1", "b2"}  # one leaf, without the taint
    assert snapshot.get("b1").free("nvidia.com/gpu") == 8  # type: ignore[union-attr]
    assert not snapshot.is_assumed("ml/w-0")


def test_not_ready_and_stale_nodes_take_nothing() -> None:
    assert not node_state(node("x", "leaf-a", ready=False)).schedulable
    assert not node_state(node("x", "leaf-a", stale=True)).schedulable
    assert not node_state(node("x", "leaf-a", unschedulable=True)).schedulable
    snapshot = Snapshot([node("a1", "leaf-a", stale=True), node("a2", "leaf-a")])
    refused = schedule_gang([worker(0), worker(1)], snapshot, build_framework(), min_member=2)
    assert isinstance(refused, Status)
    assert "0/2 nodes are available" in refused.message
