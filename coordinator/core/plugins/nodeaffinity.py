"""``nodeSelector`` and node affinity, as kube-scheduler's NodeAffinity plugin.

Filter: the node must carry every ``nodeSelector`` label and match one of the required
``nodeSelectorTerms`` ("node(s) didn't match Pod's node affinity/selector"). Score: the sum of the
weights of the preferred terms the node matches, scaled so the best node gets 100.
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.selectors import match_node_terms
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Reason, Status

__all__ = ["NodeAffinity", "node_matches_required"]

_NO_MATCH = Status.unresolvable(Reason.NODE_SELECTOR)


def node_matches_required(pod: PodRequest, node: NodeInfo) -> bool:
    """nodeSelector and required node affinity (shared with PodTopologySpread's policy)."""
    labels = node.labels
    for key, value in pod.node_selector:
        if labels.get(key) != value:
            return False
    na = pod.node_affinity
    if na is not None and na.required is not None:
        return match_node_terms(na.required, node.name, labels)
    return True


class NodeAffinity:
    name = "NodeAffinity"
    node_local = True

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        if pod.node_selector or (pod.node_affinity and pod.node_affinity.required is not None):
            return SUCCESS
        return SKIP

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        return SUCCESS if node_matches_required(pod, node) else _NO_MATCH

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        return SUCCESS if pod.node_affinity and pod.node_affinity.preferred else SKIP

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        assert pod.node_affinity is not None
        return float(
            sum(
                p.weight
                for p in pod.node_affinity.preferred
                if p.term.matches(node.name, node.labels)
            )
        )

    def normalize_scores(
        self, state: CycleState, pod: PodRequest, scores: dict[str, float]
    ) -> None:
        top = max(scores.values(), default=0.0)
        for name, value in scores.items():
            scores[name] = 0.0 if top == 0 else 100.0 * value / top
