"""The inter-pod plugins as they were before the snapshot kept per-selector counts: each
PreFilter walks the snapshot's pods (narrowed by the label index) and counts per topology
domain. ``benchmarks/affinity_scaling.py`` runs them beside the shipped plugins ("scan" vs
"indexed"); same semantics, same placements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, cast

from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.framework.profile import Framework
from coordinator.core.plugins.nodeaffinity import node_matches_required
from coordinator.core.plugins.podtopologyspread import PodTopologySpread, SpreadCounts
from coordinator.core.plugins.spreadargs import SpreadDefaults
from coordinator.core.podspec.affinity import AffinityTerm
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.spread import SpreadConstraint
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Reason, Status

__all__ = ["scan_framework"]


def scan_framework(config: SchedulerConfig | None = None) -> Framework:
    """The framework with the scanning InterPodAffinity and PodTopologySpread."""
    return build_framework(
        config,
        registry={
            "InterPodAffinity": lambda _: ScanInterPodAffinity(),
            "PodTopologySpread": lambda args: ScanPodTopologySpread(cast(SpreadDefaults, args)),
        },
    )


Pair = tuple[str, str]
HARD_POD_AFFINITY_WEIGHT: Final = 1  # kube-scheduler's hardPodAffinityWeight default


@dataclass(slots=True)
class _FilterState:
    existing_anti: dict[Pair, int] = field(default_factory=dict)
    affinity: dict[Pair, int] = field(default_factory=dict)
    anti: dict[Pair, int] = field(default_factory=dict)
    matches_own_terms: bool = False


_FILTER: Final = StateKey[_FilterState]("ScanInterPodAffinity.filter")
_SCORE: Final = StateKey[dict[Pair, int]]("ScanInterPodAffinity.score")

_EXISTING = Status.unschedulable(Reason.EXISTING_ANTI_AFFINITY)
_ANTI = Status.unschedulable(Reason.POD_ANTI_AFFINITY)
_AFFINITY = Status.unresolvable(Reason.POD_AFFINITY)


def _bump(counts: dict[Pair, int], node: NodeInfo, key: str, by: int) -> None:
    value = node.labels.get(key)
    if value is not None:
        pair = (key, value)
        counts[pair] = counts.get(pair, 0) + by


def _matches(
    term: AffinityTerm,
    namespace: str,
    labels: Mapping[str, str],
    namespaces: Mapping[str, Mapping[str, str]],
) -> bool:
    return term.matches_pod(namespace, labels, namespaces.get(namespace))


class ScanInterPodAffinity:
    name = "InterPodAffinity"

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        ns_labels = snapshot.namespaces
        fs = _FilterState()
        with_affinity = snapshot.pods_with_affinity()
        any_existing_anti = False
        for node, existing in with_affinity:
            if existing.anti_affinity:
                any_existing_anti = True
                for term in existing.anti_affinity:
                    if _matches(term, pod.namespace, pod.labels, ns_labels):
                        _bump(fs.existing_anti, node, term.topology_key, 1)
        if not (pod.pod_affinity or pod.pod_anti_affinity or any_existing_anti):
            return SKIP
        if pod.pod_affinity:
            # An existing pod counts when it matches *all* the terms: the first term's
            # selector narrows the candidates.
            for node, existing in snapshot.pods_selected_by(pod.pod_affinity[0].selector):
                if all(
                    _matches(t, existing.namespace, existing.labels, ns_labels)
                    for t in pod.pod_affinity
                ):
                    for t in pod.pod_affinity:
                        _bump(fs.affinity, node, t.topology_key, 1)
        for t in pod.pod_anti_affinity:
            for node, existing in snapshot.pods_selected_by(t.selector):
                if _matches(t, existing.namespace, existing.labels, ns_labels):
                    _bump(fs.anti, node, t.topology_key, 1)
        fs.matches_own_terms = all(
            _matches(t, pod.namespace, pod.labels, ns_labels) for t in pod.pod_affinity
        )
        state.write(_FILTER, fs)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        # kube-scheduler's order (1.2x+): the pod's affinity, its anti-affinity, then the
        # existing pods' anti-affinity towards it.
        fs = state.read(_FILTER)
        labels = node.labels
        if pod.pod_affinity:
            pods_exist = True
            for t in pod.pod_affinity:
                value = labels.get(t.topology_key)
                if value is None:
                    return _AFFINITY  # every topology key must exist on the node
                if fs.affinity.get((t.topology_key, value), 0) <= 0:
                    pods_exist = False
            if not pods_exist and not (not fs.affinity and fs.matches_own_terms):
                return _AFFINITY
        for t in pod.pod_anti_affinity:
            value = labels.get(t.topology_key)
            if value is not None and fs.anti.get((t.topology_key, value), 0) > 0:
                return _ANTI
        if fs.existing_anti:
            for pair in labels.items():
                if fs.existing_anti.get(pair, 0) > 0:
                    return _EXISTING
        return SUCCESS

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        ns_labels = snapshot.namespaces
        counts: dict[Pair, int] = {}
        with_affinity = snapshot.pods_with_affinity()
        if not (pod.pod_affinity_preferred or pod.pod_anti_affinity_preferred or with_affinity):
            return SKIP
        for sign, weighted in (
            (1, pod.pod_affinity_preferred),
            (-1, pod.pod_anti_affinity_preferred),
        ):
            for w in weighted:
                for node, existing in snapshot.pods_selected_by(w.term.selector):
                    if _matches(w.term, existing.namespace, existing.labels, ns_labels):
                        _bump(counts, node, w.term.topology_key, sign * w.weight)
        for node, existing in with_affinity:
            for t in existing.affinity:
                if _matches(t, pod.namespace, pod.labels, ns_labels):
                    _bump(counts, node, t.topology_key, HARD_POD_AFFINITY_WEIGHT)
            for w in existing.affinity_preferred:
                if _matches(w.term, pod.namespace, pod.labels, ns_labels):
                    _bump(counts, node, w.term.topology_key, w.weight)
            for w in existing.anti_affinity_preferred:
                if _matches(w.term, pod.namespace, pod.labels, ns_labels):
                    _bump(counts, node, w.term.topology_key, -w.weight)
        if not any(counts.values()):
            return SKIP  # every node would score the same
        state.write(_SCORE, counts)
        return SUCCESS

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        counts = state.read(_SCORE)
        labels = node.labels
        if len(counts) < len(labels):
            return float(sum(n for (k, v), n in counts.items() if labels.get(k) == v))
        return float(sum(counts.get(pair, 0) for pair in labels.items()))

    def normalize_scores(
        self, state: CycleState, pod: PodRequest, scores: Sequence[float]
    ) -> list[float]:
        if not scores:
            return []
        lo, hi = min(scores), max(scores)
        if hi == lo:
            return [0.0] * len(scores)
        return [100.0 * (value - lo) / (hi - lo) for value in scores]


def _included(c: SpreadConstraint, pod: PodRequest, node: NodeInfo) -> bool:
    if c.node_affinity_policy == "Honor" and not node_matches_required(pod, node):
        return False
    if c.node_taints_policy == "Honor":
        for taint in node.effective_taints:
            if taint.effect == "PreferNoSchedule":
                continue
            if not any(t.tolerates(taint) for t in pod.tolerations):
                return False
    return True


def _count(
    pod: PodRequest,
    constraints: tuple[SpreadConstraint, ...],
    snapshot: Snapshot,
    require_all: bool,
) -> SpreadCounts:
    per_value: list[dict[str, int]] = []
    # Nodes count towards a domain when they carry every constraint's key (``require_all``,
    # else the constraint's own) and pass the constraint's inclusion policies.
    every = {c.topology_key for c in constraints}
    for c in constraints:
        domain_of = snapshot.domains(c.topology_key)
        keys = every if require_all else {c.topology_key}
        eligible_all = {n.name for n in snapshot.nodes if all(k in n.labels for k in keys)}
        trivial = c.node_taints_policy == "Ignore" and (
            c.node_affinity_policy == "Ignore"
            or not (pod.node_selector or (pod.node_affinity and pod.node_affinity.required))
        )
        if trivial:
            eligible = eligible_all
        else:
            eligible = set()
            for name in eligible_all:
                node = snapshot.get(name)
                if node is not None and _included(c, pod, node):
                    eligible.add(name)
        values: dict[str, int] = dict.fromkeys((domain_of[n] for n in eligible), 0)
        for node, p in snapshot.pods_selected_by(c.selector):
            if (
                node.name in eligible
                and p.namespace == pod.namespace
                and c.selector is not None
                and c.selector.matches(p.labels)
            ):
                value = domain_of[node.name]
                values[value] += 1
        per_value.append(values)
    return SpreadCounts(constraints, tuple(per_value), require_all)


class ScanPodTopologySpread(PodTopologySpread):
    """The shipped plugin, counting by walking the pods each cycle (no kept counts, so no
    narrowing to open domains either)."""

    def count(
        self,
        pod: PodRequest,
        constraints: tuple[SpreadConstraint, ...],
        snapshot: Snapshot,
        *,
        require_all: bool = True,
    ) -> tuple[SpreadCounts, tuple[tuple[int, float], ...]]:
        counts = _count(pod, constraints, snapshot, require_all)
        return counts, tuple((min(v.values(), default=0), 1.0) for v in counts.per_value)
