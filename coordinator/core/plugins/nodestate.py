"""Node-level gates: stale agents (NodeHealth) and cordoned nodes (NodeUnschedulable)."""

from __future__ import annotations

from typing import Final

from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import Plugin, Requeue
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import UNSCHEDULABLE_TAINT, NodeInfo
from coordinator.core.status import SUCCESS, Reason, Status

__all__ = ["NodeHealth", "NodeUnschedulable"]

_STALE = Status.unresolvable(Reason.STALE_AGENT)
_CORDONED = Status.unresolvable(Reason.NODE_UNSCHEDULABLE)


class NodeHealth(Plugin):
    """No new placements on a node whose agent went silent (its inventory may be wrong)."""

    name = "NodeHealth"
    node_gate = True
    node_local = True
    alike_nodes = True  # reads only what NodeInfo.state_key stands for
    lasting_refusals = True  # pods added to a node never change whether its agent is stale

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        return _STALE if node.stale else SUCCESS


class NodeUnschedulable(Plugin):
    """``spec.unschedulable`` (kubectl cordon) keeps pods off unless they tolerate
    ``node.kubernetes.io/unschedulable:NoSchedule``, as in kube-scheduler."""

    name = "NodeUnschedulable"
    node_gate = True
    requeue = Requeue.NODE
    node_local = True
    alike_nodes = True  # reads only what NodeInfo.state_key stands for
    lasting_refusals = True  # pods added to a node never uncordon it

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        if not node.unschedulable:
            return SUCCESS
        if any(t.tolerates(UNSCHEDULABLE_TAINT) for t in pod.tolerations):
            return SUCCESS
        return _CORDONED


NODE_HEALTH: Final = PluginSpec[None](plugin=NodeHealth)


NODE_UNSCHEDULABLE: Final = PluginSpec[None](plugin=NodeUnschedulable)
