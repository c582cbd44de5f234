"""A gang decided on the scheduling core's snapshot: the core's filters veto planned nodes and the
gang is re-planned around them; the snapshot passed in is never changed."""

from __future__ import annotations

from typing import Any

from coordinator.core.domains.capacity import node_state
from coordinator.core.gangs.cycle import GangDecision, schedule_gang
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status
from devcluster.pods import gang_members
from tests.support.sched_hw import dgx_h100, gpu_node, request

# Two 8-GPU members of gang "train" (min 2), asking for GPUs only.
WORKERS = [
    request(obj)
    for obj in gang_members("train", 2, prefix="w", namespace="ml", gpus=8, cpu=None, memory=None)
]


def node(name: str, leaf: str, **kw: Any) -> NodeInfo:
    labels = {"topos.io/leaf": leaf, "topos.io/spine": "spine-1"}
    return gpu_node(name, dgx_h100(name), labels=labels, **kw)


def test_a_tainted_node_is_vetoed_by_the_core_and_the_gang_is_replanned() -> None:
    snapshot = Snapshot(
        [
            node("a1", "leaf-a", taints=[Taint("dedicated", "infer", "NoSchedule")]),
            node("a2", "leaf-a"),
            node("b1", "leaf-b"),
            node("b2", "leaf-b"),
        ]
    )
    decided = schedule_gang(WORKERS, snapshot, build_framework(), min_member=2)
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
    refused = schedule_gang(WORKERS, snapshot, build_framework(), min_member=2)
    assert isinstance(refused, Status)
    assert "0/2 nodes are available" in refused.message
