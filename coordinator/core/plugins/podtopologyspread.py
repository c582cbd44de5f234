"""Topology spread constraints, as kube-scheduler's PodTopologySpread plugin.

For each ``DoNotSchedule`` constraint, PreFilter counts the pods in the incoming pod's namespace
matching the constraint's selector per topology domain, over the nodes that carry every
constraint's key and pass its inclusion policies (``nodeAffinityPolicy: Honor`` — the pod's
nodeSelector/required affinity — by default; ``nodeTaintsPolicy: Ignore`` by default). Filter: the
node must carry the key ("… (missing required label)", unresolvable), and placing the pod there
must keep ``count + self - min ≤ maxSkew``, where ``min`` is 0 while fewer than ``minDomains``
domains exist. ``ScheduleAnyway`` constraints only score: fewer matching pods in the node's
domain is better, domains weighted by log(number of domains + 2) as kube does.

The counts come from the snapshot's :meth:`~Snapshot.domain_counts` (kept current across cycles,
so a cycle reads them instead of walking the pods) whenever the constraint's inclusion policies
do not depend on the pod (``nodeTaintsPolicy: Ignore``, and ``nodeAffinityPolicy: Ignore`` or a
pod without node selection); otherwise they are counted per cycle. When a constraint leaves at
most half of its domains open (``maxSkew: 1`` per hostname, once the pods are spread), its
``candidates`` are the nodes of the open domains, so the cycle visits only those.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.plugins.nodeaffinity import node_matches_required
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.spread import SpreadConstraint
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podcounts import InNamespace
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Reason, Status

__all__ = ["PodTopologySpread"]


@dataclass(frozen=True, slots=True)
class _Counts:
    constraints: tuple[SpreadConstraint, ...]
    per_value: tuple[Mapping[str, int], ...]  # per constraint: domain value → matching pods


# Per DoNotSchedule constraint: topology key, matching pods per domain, the most a domain may
# already hold for the pod to go there, the share of its domains open (1.0: not known).
_Limit = tuple[str, Mapping[str, int], int, float]
_LIMITS: Final = StateKey[tuple[_Limit, ...]]("PodTopologySpread.filter")
_SCORE: Final = StateKey[tuple[_Counts, tuple[float, ...]]]("PodTopologySpread.score")

_MISSING = Status.unresolvable(Reason.SPREAD_MISSING_LABEL)
_SKEW = Status.unschedulable(Reason.SPREAD)


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


def _trivial(c: SpreadConstraint, pod: PodRequest) -> bool:
    """Whether every node carrying the keys counts, whatever the pod (no inclusion policy)."""
    return c.node_taints_policy == "Ignore" and (
        c.node_affinity_policy == "Ignore"
        or not (pod.node_selector or (pod.node_affinity and pod.node_affinity.required))
    )


def _count(
    pod: PodRequest, constraints: tuple[SpreadConstraint, ...], snapshot: Snapshot
) -> tuple[_Counts, tuple[tuple[int, float], ...]]:
    """Matching pods per domain for each constraint, and each constraint's least count with
    the share of its domains holding it (``1.0`` where counted per cycle)."""
    per_value: list[Mapping[str, int]] = []
    least: list[tuple[int, float]] = []
    # Nodes count towards a domain when they carry every constraint's key and pass the
    # constraint's inclusion policies.
    required = tuple(sorted({c.topology_key for c in constraints}))
    eligible_all: set[str] | None = None
    for c in constraints:
        if _trivial(c, pod):
            counts = snapshot.domain_counts(
                InNamespace(pod.namespace, c.selector), c.topology_key, required
            )
            per_value.append(counts.counts)
            low = counts.least
            least.append((low, counts.hist.get(low, 0) / max(1, len(counts.counts))))
            continue
        if eligible_all is None:
            keyed = [snapshot.domains(k) for k in required]
            eligible_all = set(keyed[0]).intersection(*keyed[1:])
        domain_of = snapshot.domains(c.topology_key)
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
                values[domain_of[node.name]] += 1
        per_value.append(values)
        least.append((min(values.values(), default=0), 1.0))
    return _Counts(constraints, tuple(per_value)), tuple(least)


class PodTopologySpread:
    name = "PodTopologySpread"

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        hard = tuple(c for c in pod.spread if c.when_unsatisfiable == "DoNotSchedule")
        if not hard:
            return SKIP
        counts, least = _count(pod, hard, snapshot)
        limits = []
        for c, values, (min_match, share) in zip(
            counts.constraints, counts.per_value, least, strict=True
        ):
            self_match = 1 if c.selector is not None and c.selector.matches(pod.labels) else 0
            if c.min_domains is not None and len(values) < c.min_domains:
                min_match, share = 0, 1.0
            # count + self - min <= maxSkew  ⇔  count <= maxSkew + min - self
            allowed = c.max_skew + min_match - self_match
            # Only the least-loaded domains open (maxSkew 1, the pod matching itself).
            open_share = share if allowed == min_match else 1.0
            limits.append((c.topology_key, values, allowed, open_share))
        state.write(_LIMITS, tuple(limits))
        return SUCCESS

    def candidates(
        self, state: CycleState, pod: PodRequest, snapshot: Snapshot
    ) -> Collection[str] | None:
        """The nodes of the open domains, when a constraint leaves at most half of them open
        (in the snapshot's order)."""
        limits = state.get(_LIMITS)
        narrow = [limit for limit in limits or () if limit[3] <= 0.5]
        if not narrow:
            return None
        key, values, allowed, _ = min(narrow, key=lambda limit: limit[3])
        return [
            name
            for name, value in snapshot.domains(key).items()
            if values.get(value, allowed + 1) <= allowed
        ]

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        labels = node.labels
        for key, values, allowed, _ in state.read(_LIMITS):
            value = labels.get(key)
            if value is None:
                return _MISSING
            if values.get(value, 0) > allowed:
                return _SKEW
        return SUCCESS

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        soft = tuple(c for c in pod.spread if c.when_unsatisfiable == "ScheduleAnyway")
        if not soft:
            return SKIP
        # Hostname-level domains count only the nodes still in the running (as kube does).
        counts, _ = _count(pod, soft, snapshot)
        weights = tuple(math.log(len(v) + 2) for v in counts.per_value)
        state.write(_SCORE, (counts, weights))
        return SUCCESS

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        counts, weights = state.read(_SCORE)
        total = 0.0
        for c, values, w in zip(counts.constraints, counts.per_value, weights, strict=True):
            value = node.labels.get(c.topology_key)
            if value is None:
                return -1.0  # ignored node: scored 0 after normalisation
            total += w * (values.get(value, 0) + c.max_skew - 1)
        return total

    def normalize_scores(
        self, state: CycleState, pod: PodRequest, scores: dict[str, float]
    ) -> None:
        valid = [s for s in scores.values() if s >= 0]
        if not valid:
            for name in scores:
                scores[name] = 0.0
            return
        hi, lo = max(valid), min(valid)
        for name, s in scores.items():
            if s < 0:
                scores[name] = 0.0
            elif hi == 0:
                scores[name] = 100.0
            else:
                scores[name] = 100.0 * (hi + lo - s) / hi
