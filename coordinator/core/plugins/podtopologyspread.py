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

A pod that declares no constraints of its own is spread by the profile's default constraints
(:mod:`coordinator.core.plugins.spreadargs`; kube's ``defaultingType: System`` unless the
config says otherwise), with the selector of the Services and controllers that select it
(:meth:`~coordinator.core.snapshot.workloads.WorkloadSelectors.default_selector`); none when
nothing selects it, and none for a pod asking ``topos.io/placement: consolidated`` (its own word
that it be packed, which :mod:`.groupspread` scores). Under ``System`` a node lacking one of the
keys (no zone label) is still scored by the others; otherwise, as for a pod's own constraints,
such a node scores 0.

Scores are kube's to the integer: each node's sum of ``count × weight + maxSkew - 1`` rounded,
then ``100 × (max + min - score) // max``; a constraint's weight is log(domains + 2), its domains
counted among the nodes that passed the filters (per node for ``kubernetes.io/hostname``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, cast

from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.plugins.nodeaffinity import node_matches_required
from coordinator.core.plugins.spreadargs import HOSTNAME, SYSTEM_SPREAD, SpreadDefaults
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.selectors import LabelSelector
from coordinator.core.podspec.spread import SpreadConstraint
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podcounts import InNamespace
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Reason, Status

__all__ = ["PodTopologySpread", "SpreadCounts"]


@dataclass(frozen=True, slots=True)
class SpreadCounts:
    constraints: tuple[SpreadConstraint, ...]
    per_value: tuple[Mapping[str, int], ...]  # per constraint: domain value → matching pods
    require_all: bool = True  # a node lacking any constraint's key is not counted nor scored


# Per DoNotSchedule constraint: topology key, matching pods per domain, the most a domain may
# already hold for the pod to go there, the share of its domains open (1.0: not known).
_Limit = tuple[str, Mapping[str, int], int, float]
_LIMITS: Final = StateKey[tuple[_Limit, ...]]("PodTopologySpread.filter")
_SCORE: Final = StateKey[tuple[SpreadCounts, tuple[float, ...]]]("PodTopologySpread.score")

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
    pod: PodRequest,
    constraints: tuple[SpreadConstraint, ...],
    snapshot: Snapshot,
    *,
    require_all: bool = True,
) -> tuple[SpreadCounts, tuple[tuple[int, float], ...]]:
    """Matching pods per domain for each constraint, and each constraint's least count with
    the share of its domains holding it (``1.0`` where counted per cycle)."""
    per_value: list[Mapping[str, int]] = []
    least: list[tuple[int, float]] = []
    # Nodes count towards a domain when they carry every constraint's key (``require_all``,
    # else that constraint's own) and pass the constraint's inclusion policies.
    every = tuple(sorted({c.topology_key for c in constraints}))
    carrying: dict[tuple[str, ...], set[str]] = {}
    for c in constraints:
        required = every if require_all else (c.topology_key,)
        if _trivial(c, pod):
            counts = snapshot.domain_counts(
                InNamespace(pod.namespace, c.selector), c.topology_key, required
            )
            per_value.append(counts.counts)
            low = counts.least
            least.append((low, counts.hist.get(low, 0) / max(1, len(counts.counts))))
            continue
        eligible_all = carrying.get(required)
        if eligible_all is None:
            keyed = [snapshot.domains(k) for k in required]
            eligible_all = carrying[required] = set(keyed[0]).intersection(*keyed[1:])
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
    return SpreadCounts(constraints, tuple(per_value), require_all), tuple(least)


#: How many workloads' default constraints :class:`PodTopologySpread` keeps (then starts over).
_KEPT_SELECTORS: Final = 256


def _round(x: float) -> int:
    """Go's math.Round for the non-negative scores here (halves away from zero)."""
    return math.floor(x + 0.5)


class PodTopologySpread(Plugin):
    name = "PodTopologySpread"

    def __init__(self, defaults: SpreadDefaults = SYSTEM_SPREAD) -> None:
        self.defaults = defaults
        # The defaults' constraints of one ``whenUnsatisfiable`` with one workload's selector:
        # the pods of a workload share them (built once, not twice a cycle).
        self._with_selector: dict[tuple[str, LabelSelector], tuple[SpreadConstraint, ...]] = {}

    def constraints(
        self, pod: PodRequest, snapshot: Snapshot, when: str
    ) -> tuple[tuple[SpreadConstraint, ...], bool]:
        """The pod's ``when`` constraints — its own, else the defaults with the selector of the
        workloads selecting it — and whether a node must carry every key to count."""
        if pod.spread:
            return tuple(c for c in pod.spread if c.when_unsatisfiable == when), True
        if pod.placement == "consolidated":
            return (), True  # the pod's own strategy packs it: the defaults do not spread it
        if not any(c.when_unsatisfiable == when for c in self.defaults.constraints):
            return (), True
        selector = snapshot.workloads.default_selector(pod)
        if selector is None:
            return (), True
        found = self._with_selector.get((when, selector))
        if found is None:
            if len(self._with_selector) >= _KEPT_SELECTORS:
                self._with_selector.clear()
            found = self._with_selector[when, selector] = tuple(
                replace(c, selector=selector)
                for c in self.defaults.constraints
                if c.when_unsatisfiable == when
            )
        return found, not self.defaults.system

    def count(
        self,
        pod: PodRequest,
        constraints: tuple[SpreadConstraint, ...],
        snapshot: Snapshot,
        *,
        require_all: bool = True,
    ) -> tuple[SpreadCounts, tuple[tuple[int, float], ...]]:
        """Matching pods per domain of each constraint, with each one's least count and the
        share of its domains holding it (the snapshot's kept counts where they serve)."""
        return _count(pod, constraints, snapshot, require_all=require_all)

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        hard, _ = self.constraints(pod, snapshot, "DoNotSchedule")
        if not hard:
            return SKIP
        counts, least = self.count(pod, hard, snapshot)
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
        soft, require_all = self.constraints(pod, snapshot, "ScheduleAnyway")
        if not soft:
            return SKIP
        counts, _ = self.count(pod, soft, snapshot, require_all=require_all)
        # Each constraint's weight: log(domains + 2), its domains those of the nodes that passed
        # the filters (a node per hostname) — skipping nodes lacking a key where all must be
        # carried, else counting them as one domain of their own (the label's empty value).
        scored = nodes
        if require_all:
            keys = {c.topology_key for c in soft}
            if len(keys) == 1:
                (key,) = keys
                scored = [n for n in nodes if key in n.labels]
            else:
                scored = [n for n in nodes if keys <= n.labels.keys()]
        weights = []
        for c in soft:
            if c.topology_key == HOSTNAME:
                size = len(scored)
            else:
                size = len({n.labels.get(c.topology_key, "") for n in scored})
            weights.append(math.log(size + 2))
        state.write(_SCORE, (counts, tuple(weights)))
        return SUCCESS

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        counts, weights = state.read(_SCORE)
        total = 0.0
        for c, values, w in zip(counts.constraints, counts.per_value, weights, strict=True):
            value = node.labels.get(c.topology_key)
            if value is None:
                if counts.require_all:
                    return -1.0  # ignored node: scored 0 after normalisation
                continue
            total += w * values.get(value, 0) + c.max_skew - 1
        return float(_round(total))

    def score_nodes(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo]
    ) -> list[float]:
        """:meth:`score` of each node: one constraint's part worked out once per topology value
        (a zone's nodes share their zone's), several constraints' (the system defaults, zone
        and hostname) per node."""
        counts, weights = state.read(_SCORE)
        require_all = counts.require_all
        if len(counts.constraints) == 1:
            (c,), (values,), (w,) = counts.constraints, counts.per_value, weights
            return self._score_one(c, values, w, require_all, nodes)
        # Each constraint's part, as score() adds it (to the bit), worked out per node scored,
        # a constraint at a time (a column of the nodes' values): a table per topology value
        # would cost a hostname constraint an entry for every node holding a matching pod,
        # where only the nodes scored (kube's share of them) are read.
        columns = [
            ([n.labels.get(c.topology_key) for n in nodes], values, w, c.max_skew)
            for c, values, w in zip(counts.constraints, counts.per_value, weights, strict=True)
        ]
        floor = math.floor  # _round inlined: it ran once per node scored
        if not any(None in got for got, _, _, _ in columns):
            totals = [0.0] * len(nodes)
            for got, values, w, skew in columns:
                found = cast(list[str], got)  # no None in it
                totals = [
                    t + (w * values.get(v, 0) + skew - 1)
                    for t, v in zip(totals, found, strict=True)
                ]
            return [float(floor(t + 0.5)) for t in totals]
        out: list[float] = []
        for i in range(len(nodes)):  # a node lacks a key: ignored, or that part left out
            total = 0.0
            for got, values, w, skew in columns:
                value = got[i]
                if value is None:
                    if require_all:
                        total = -1.0  # ignored node: scored 0 after normalisation
                        break
                    continue
                total += w * values.get(value, 0) + skew - 1
            else:
                total = float(floor(total + 0.5))
            out.append(total)
        return out

    @staticmethod
    def _score_one(
        c: SpreadConstraint,
        values: Mapping[str, int],
        w: float,
        require_all: bool,
        nodes: Sequence[NodeInfo],
    ) -> list[float]:
        key, extra = c.topology_key, c.max_skew - 1
        missing = -1.0 if require_all else 0.0
        by_value: dict[str | None, float] = {}
        out: list[float] = []
        for value in [n.labels.get(key) for n in nodes]:
            found = by_value.get(value)
            if found is None:
                found = by_value[value] = (
                    missing if value is None else float(_round(w * values.get(value, 0) + extra))
                )
            out.append(found)
        return out

    def normalize_scores(
        self, state: CycleState, pod: PodRequest, scores: Sequence[float]
    ) -> list[float]:
        valid = [int(s) for s in scores if s >= 0]
        if not valid:
            return [0.0] * len(scores)
        hi, lo = max(valid), min(valid)
        if hi == 0:
            return [0.0 if s < 0 else 100.0 for s in scores]
        top = hi + lo  # kube's int64 arithmetic: maxScore * (max + min - s) / max
        return [0.0 if s < 0 else float(100 * (top - int(s)) // hi) for s in scores]


PLUGIN: Final = PluginSpec(
    plugin=PodTopologySpread,
    args=SpreadDefaults,
    factory=lambda args, _: PodTopologySpread(args),
    weight=2,
    weight_key="topology_spread",
)
