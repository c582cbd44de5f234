"""``nodeSelector`` and node affinity, as kube-scheduler's NodeAffinity plugin.

Filter: the node must carry every ``nodeSelector`` label and match one of the required
``nodeSelectorTerms`` ("node(s) didn't match Pod's node affinity/selector"). Score: the sum of the
weights of the preferred terms the node matches, scaled so the best node gets 100.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Final

from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import Plugin, Requeue
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.selectors import NodeSelectorTerm, match_node_terms
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


class NodeAffinity(Plugin):
    name = "NodeAffinity"
    node_gate = True
    requeue = Requeue.NODE
    node_local = True
    #: It reads the node's name and hostname label, but only for pods with a nodeSelector or
    #: node affinity, for which the cycle shares nothing between nodes alike.
    alike_nodes = True
    lasting_refusals = True  # pods added to a node never change its labels or name

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        if pod.node_selector or (pod.node_affinity and pod.node_affinity.required is not None):
            return SUCCESS
        return SKIP

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        return SUCCESS if node_matches_required(pod, node) else _NO_MATCH

    def candidates(
        self, state: CycleState, pod: PodRequest, snapshot: Snapshot
    ) -> Collection[str] | None:
        """Nodes carrying a label value the pod requires (the snapshot's label index): the first
        ``nodeSelector`` label, and per required term its first ``In`` expression."""
        found: list[Collection[str]] = []
        for key, value in pod.node_selector[:1]:
            found.append(snapshot.nodes_labelled(key, (value,)))
        na = pod.node_affinity
        if na is not None and na.required is not None:
            terms = [_term_candidates(t, snapshot) for t in na.required]
            known = [t for t in terms if t is not None]
            if len(known) == len(terms):
                found.append(known[0] if len(known) == 1 else set().union(*known))
        if len(found) < 2:
            return found[0] if found else None
        return set(found[0]).intersection(found[1])

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
        self, state: CycleState, pod: PodRequest, scores: Sequence[float]
    ) -> list[float]:
        top = max(scores, default=0.0)
        if top == 0:
            return [0.0] * len(scores)
        return [100.0 * value / top for value in scores]


def _term_candidates(term: NodeSelectorTerm, snapshot: Snapshot) -> Collection[str] | None:
    """A superset of the nodes one required term matches (``None``: no ``In`` to narrow by)."""
    if not term.match_expressions and not term.match_fields:
        return ()  # an empty term matches no node
    for req in term.match_fields:
        if req.operator == "In":
            return frozenset(req.values)  # node names
    for req in term.match_expressions:
        if req.operator == "In":
            return snapshot.nodes_labelled(req.key, req.values)
    return None


PLUGIN: Final = PluginSpec[None](
    plugin=NodeAffinity, weight=2, pool_weight=7, weight_key="node_affinity"
)
