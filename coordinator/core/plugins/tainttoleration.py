"""Taints and tolerations, as kube-scheduler's TaintToleration plugin.

Filter: a ``NoSchedule`` or ``NoExecute`` taint the pod does not tolerate rejects the node with
kube-scheduler's (1.33) reason "node(s) had untolerated taint(s)"; which taint rides in the
status detail ("{key: value}") for explanations. A node that is not Ready carries
``node.kubernetes.io/not-ready:NoSchedule`` (added by NodeInfo when the node lifecycle controller
has not yet done so). Score: fewer untolerated ``PreferNoSchedule`` taints is better.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import Plugin, Requeue
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.tolerations import Taint, Toleration
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Reason, Status

__all__ = ["TaintToleration"]


class TaintToleration(Plugin):
    name = "TaintToleration"
    node_gate = True
    requeue = Requeue.NODE
    node_local = True
    alike_nodes = True  # reads only what NodeInfo.state_key stands for
    lasting_refusals = True  # pods added to a node never change its taints

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        for taint in node.effective_taints:
            if taint.effect == "PreferNoSchedule":
                continue
            if not any(t.tolerates(taint) for t in pod.tolerations):
                return Status.unresolvable(
                    Reason.TAINTS, detail=Reason.untolerated_taint(taint.key, taint.value)
                )
        return SUCCESS

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        # Only PreferNoSchedule taints score; without any, every node would get the same 100.
        return SUCCESS if snapshot.has_prefer_no_schedule_taints() else SKIP

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        prefer = [t for t in pod.tolerations if t.effect in ("", "PreferNoSchedule")]
        return float(
            sum(
                1
                for taint in node.effective_taints
                if taint.effect == "PreferNoSchedule" and not _tolerated(prefer, taint)
            )
        )

    def normalize_scores(
        self, state: CycleState, pod: PodRequest, scores: Sequence[float]
    ) -> list[float]:
        # Reverse: the node with the most intolerable taints gets 0, none gets 100.
        top = max(scores, default=0.0)
        if top == 0:
            return [100.0] * len(scores)
        return [100.0 * (top - value) / top for value in scores]


def _tolerated(tolerations: list[Toleration], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


PLUGIN: Final = PluginSpec[None](plugin=TaintToleration, weight=3, weight_key="taint_toleration")
