"""Pod affinity and anti-affinity, as kube-scheduler's InterPodAffinity plugin.

Counts are kept per *topology pair* (a node label key and value). PreFilter gathers

- where existing pods' required anti-affinity terms match the incoming pod (symmetry: a pod may
  not land where an existing pod refuses it — "node(s) didn't satisfy existing pods anti-affinity
  rules"): the snapshot indexes those terms with the topology values their pods sit in, so
  PreFilter matches each distinct term once instead of walking the pods;
- where existing pods match *all* the incoming pod's required affinity terms: for one term (the
  usual case) the snapshot's :meth:`~Snapshot.domain_counts`, as for anti-affinity below; for
  several, walking the pods the first term's selector narrows to;
- where existing pods match each of its required anti-affinity terms: the snapshot's
  :meth:`~Snapshot.domain_counts` per term, kept current across cycles.

The incoming pod's terms are counted with their ``namespaceSelector`` resolved to the namespaces
it selects (:meth:`~Snapshot.resolved`, as kube's PreFilter merges them into the term's
namespaces): one count per term and set of namespaces, kept until a namespace's labels change
(the view then builds a new snapshot; the waiting pods with terms go back to the queue).

Filter checks the node's pairs, in kube-scheduler's order: the pod's affinity, its
anti-affinity, then the existing pods' anti-affinity. A pod whose affinity terms no existing pod
matches may still go where the node has the topology keys, when it matches its own terms (the
first pod of a group that wants to be together). Score sums preferred weights (both ways, plus
existing pods' required affinity terms at weight 1) per pair, min-max normalised; the existing
pods' terms come from the snapshot's :meth:`~Snapshot.scoring_terms`, each distinct term matched
once per cycle.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.affinity import AffinityTerm
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Reason, Status

__all__ = ["InterPodAffinity"]

Pair = tuple[str, str]
HARD_POD_AFFINITY_WEIGHT: Final = 1  # kube-scheduler's hardPodAffinityWeight default


# A topology key and, per value of it, how many pods make a node there refuse the pod.
Refusals = tuple[str, Mapping[str, int]]


@dataclass(slots=True)
class _FilterState:
    existing_anti: list[Refusals] = field(default_factory=list)
    # per affinity term: its topology key and, per value, the pods matching all the terms
    affinity: list[tuple[str, Mapping[str, int]]] = field(default_factory=list)
    any_affinity: bool = False  # some pod matching all the terms sits on a node with a key
    anti: list[Refusals] = field(default_factory=list)
    matches_own_terms: bool = False
    refused: int = 0  # the most topology values one of the refusals refuses


_FILTER: Final = StateKey[_FilterState]("InterPodAffinity.filter")
#: Per topology key scored: pods per value and the weight they count with.
_SCORE: Final = StateKey[list[tuple[str, Mapping[str, int], int]]]("InterPodAffinity.score")

_EXISTING = Status.unschedulable(Reason.EXISTING_ANTI_AFFINITY)
_ANTI = Status.unschedulable(Reason.POD_ANTI_AFFINITY)
_AFFINITY = Status.unresolvable(Reason.POD_AFFINITY)


def _bump(counts: dict[Pair, int], node: NodeInfo, key: str, by: int) -> None:
    value = node.labels.get(key)
    if value is not None:
        pair = (key, value)
        counts[pair] = counts.get(pair, 0) + by


def _matching(term: AffinityTerm, snapshot: Snapshot) -> tuple[Mapping[str, int], int]:
    """Pods ``term`` matches per value of its topology key, and how many values hold one."""
    key = term.topology_key
    found = snapshot.domain_counts(snapshot.resolved(term), key, (key,))
    return found.counts, len(found.counts) - found.hist.get(0, 0)


class InterPodAffinity(Plugin):
    name = "InterPodAffinity"

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        own_ns = snapshot.namespaces.get(pod.namespace)
        existing_anti = [
            (term.topology_key, values)
            for term, values in snapshot.anti_affinity_terms().items()
            if term.matches_pod(pod.namespace, pod.labels, own_ns)
        ]
        if not (pod.pod_affinity or pod.pod_anti_affinity or existing_anti):
            return SKIP
        fs = _FilterState(existing_anti=existing_anti)
        fs.refused = max((len(values) for _, values in existing_anti), default=0)  # positives
        # The terms' namespaceSelectors resolved to namespaces, as kube's PreFilter does: from
        # here on a pod is matched by its namespace's name and its labels.
        affinity = [snapshot.resolved(t) for t in pod.pod_affinity]
        if len(affinity) == 1:
            (t,) = affinity
            counts, holding = _matching(t, snapshot)
            fs.affinity = [(t.topology_key, counts)]
            fs.any_affinity = holding > 0
        elif affinity:
            # An existing pod counts when it matches *all* the terms: the first term's
            # selector narrows the candidates.
            pairs: dict[Pair, int] = {}
            for node, existing in snapshot.pods_selected_by(affinity[0].selector):
                if all(t.matches_pod(existing.namespace, existing.labels, None) for t in affinity):
                    for t in affinity:
                        _bump(pairs, node, t.topology_key, 1)
            fs.affinity = [
                (t.topology_key, {v: n for (k, v), n in pairs.items() if k == t.topology_key})
                for t in affinity
            ]
            fs.any_affinity = bool(pairs)
        for t in pod.pod_anti_affinity:
            counts, refused = _matching(t, snapshot)
            fs.anti.append((t.topology_key, counts))
            fs.refused = max(fs.refused, refused)
        fs.matches_own_terms = all(t.matches_pod(pod.namespace, pod.labels, None) for t in affinity)
        state.write(_FILTER, fs)
        return SUCCESS

    def candidates(
        self, state: CycleState, pod: PodRequest, snapshot: Snapshot
    ) -> Collection[str] | None:
        """The nodes no anti-affinity refuses, once one refusal covers half the cluster or more
        (each pod of a large anti-affine set on a node of its own); in the snapshot's order.
        Below that (counted without a walk: the snapshot keeps how many values hold matching
        pods), the cycle's visit in order, refusing with Filter, costs less than a walk over
        every node."""
        fs = state.get(_FILTER)
        if fs is None or fs.refused * 2 < len(snapshot):
            return None
        refusals = [*fs.anti, *fs.existing_anti]
        refused: dict[str, set[str]] = {}  # topology key → values refused
        for key, values in refusals:
            refused.setdefault(key, set()).update(v for v, n in values.items() if n > 0)
        if len(refused) == 1:
            ((key, bad),) = refused.items()
            return [n.name for n in snapshot.nodes if n.labels.get(key) not in bad]
        return [
            n.name
            for n in snapshot.nodes
            if not any(n.labels.get(key) in bad for key, bad in refused.items())
        ]

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        # kube-scheduler's order (1.2x+): the pod's affinity, its anti-affinity, then the
        # existing pods' anti-affinity towards it.
        fs = state.read(_FILTER)
        labels = node.labels
        if fs.affinity:
            pods_exist = True
            for key, counts in fs.affinity:
                value = labels.get(key)
                if value is None:
                    return _AFFINITY  # every topology key must exist on the node
                if counts.get(value, 0) <= 0:
                    pods_exist = False
            if not pods_exist and not (not fs.any_affinity and fs.matches_own_terms):
                return _AFFINITY
        for key, values in fs.anti:
            value = labels.get(key)
            if value is not None and values.get(value, 0) > 0:
                return _ANTI
        for key, values in fs.existing_anti:
            value = labels.get(key)
            if value is not None and values.get(value, 0) > 0:
                return _EXISTING
        return SUCCESS

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        placed = snapshot.scoring_terms()
        if not (pod.pod_affinity_preferred or pod.pod_anti_affinity_preferred or placed):
            return SKIP
        # Per topology key, the counts per value that score and their weights: the index's own
        # counts, read (not copied) per node — a term on the hostname holds a value per node.
        parts: dict[str, list[tuple[Mapping[str, int], int]]] = {}
        for sign, weighted in (
            (1, pod.pod_affinity_preferred),
            (-1, pod.pod_anti_affinity_preferred),
        ):
            for w in weighted:
                key = w.term.topology_key
                parts.setdefault(key, []).append((_matching(w.term, snapshot)[0], sign * w.weight))
        # The placed pods' terms, each distinct term matched once (the index keeps how many
        # pods carry it per topology value).
        own_ns = snapshot.namespaces.get(pod.namespace)
        for term, values in placed.affinity.terms.items():
            if term.matches_pod(pod.namespace, pod.labels, own_ns):
                parts.setdefault(term.topology_key, []).append((values, HARD_POD_AFFINITY_WEIGHT))
        for w, values in placed.affinity_preferred.terms.items():
            if w.term.matches_pod(pod.namespace, pod.labels, own_ns):
                parts.setdefault(w.term.topology_key, []).append((values, w.weight))
        for w, values in placed.anti_preferred.terms.items():
            if w.term.matches_pod(pod.namespace, pod.labels, own_ns):
                parts.setdefault(w.term.topology_key, []).append((values, -w.weight))
        scoring: list[tuple[str, Mapping[str, int], int]] = []
        for key, found in parts.items():
            if len(found) == 1:
                counts, weight = found[0]
                if any(counts.values()):
                    scoring.append((key, counts, weight))
                continue
            summed: dict[str, int] = {}
            for counts, weight in found:
                for value, n in counts.items():
                    if n:  # the index's counts hold every domain, most of them at 0
                        summed[value] = summed.get(value, 0) + weight * n
            if any(summed.values()):
                scoring.append((key, summed, 1))
        if not scoring:
            return SKIP  # every node would score the same
        state.write(_SCORE, scoring)
        return SUCCESS

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        labels = node.labels
        total = 0
        for key, values, weight in state.read(_SCORE):
            value = labels.get(key)
            if value is not None:
                total += weight * values.get(value, 0)
        return float(total)

    def score_nodes(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo]
    ) -> list[float]:
        scoring = state.read(_SCORE)
        if len(scoring) == 1:  # the usual case: one topology key
            ((key, values, weight),) = scoring
            get = values.get
            found = [n.labels.get(key) for n in nodes]
            return [0.0 if v is None else float(weight * get(v, 0)) for v in found]
        return [self.score(state, pod, n) for n in nodes]

    def normalize_scores(
        self, state: CycleState, pod: PodRequest, scores: Sequence[float]
    ) -> list[float]:
        if not scores:
            return []
        lo, hi = min(scores), max(scores)
        if hi == lo:
            return [0.0] * len(scores)
        return [100.0 * (value - lo) / (hi - lo) for value in scores]


PLUGIN: Final = PluginSpec[None](
    plugin=InterPodAffinity, weight=2, pool_weight=2, weight_key="inter_pod_affinity"
)
