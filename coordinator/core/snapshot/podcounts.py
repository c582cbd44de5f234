"""Pods counted per topology domain, kept current as pods are assumed, forgotten and replaced —
kube-scheduler's PreFilter counts for PodTopologySpread and InterPodAffinity, but computed once
per selector and reused by every cycle that asks again instead of walked per pod.

- :class:`DomainCounts`: for one *matcher* (a spread constraint's selector in its namespace, or
  a pod anti-affinity term) and one topology key, the matching pods per value of that key over
  the nodes carrying every ``required`` key. Every such domain is present (zeros included) and a
  histogram of the counts gives the least-loaded domain without a walk.
- :class:`TermIndex`: the required anti-affinity terms of the pods already placed, each
  with the topology values where pods carrying it sit (the symmetric half of anti-affinity).
- :class:`ScoringTerms`: the same for the terms of placed pods that weigh on an incoming pod's
  score (required affinity, preferred affinity and anti-affinity): each distinct term is matched
  once per cycle instead of once per pod carrying it.

A matcher must decide from a pod's namespace and labels alone (no namespace labels): a term
with a ``namespaceSelector`` that names labels is counted once resolved to the namespaces it
selects (:meth:`~coordinator.core.snapshot.snapshot.Snapshot.resolved`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeVar

from coordinator.core.podspec.affinity import AffinityTerm, WeightedAffinityTerm
from coordinator.core.podspec.selectors import LabelSelector
from coordinator.core.snapshot.podinfo import PodInfo

__all__ = [
    "CountKey",
    "DomainCounts",
    "InNamespace",
    "PodMatcher",
    "ScoringTerms",
    "TermIndex",
]

COUNTS_LIMIT: Final = 64  # counts kept (each as large as its domains) before a fresh start


class PodMatcher(Protocol):
    """Hashable; ``matches_pod`` must not need namespace labels (called with ``None``)."""

    @property
    def selector(self) -> LabelSelector | None: ...

    def matches_pod(
        self, namespace: str, labels: Mapping[str, str], ns_labels: Mapping[str, str] | None
    ) -> bool: ...


@dataclass(frozen=True, slots=True)
class InNamespace:
    """The pods of one namespace a label selector matches (a spread constraint's pods)."""

    namespace: str
    selector: LabelSelector | None

    def matches_pod(
        self, namespace: str, labels: Mapping[str, str], ns_labels: Mapping[str, str] | None
    ) -> bool:
        return (
            namespace == self.namespace
            and self.selector is not None
            and self.selector.matches(labels)
        )


T = TypeVar("T", AffinityTerm, WeightedAffinityTerm)

# matcher, topology key, keys a node must carry for its pods to count
CountKey = tuple[PodMatcher, str, tuple[str, ...]]


class DomainCounts:
    """Matching pods per topology value, for the nodes carrying every required key."""

    __slots__ = ("counts", "gate", "hist", "key", "matcher", "required")

    def __init__(self, matcher: PodMatcher, key: str, required: tuple[str, ...]) -> None:
        self.matcher = matcher
        self.key = key
        self.required = required
        self.counts: dict[str, int] = {}
        self.hist: dict[int, int] = {}  # count → how many domains hold it
        selector = matcher.selector
        self.gate: tuple[str, str] | None = (
            selector.match_labels[0] if selector is not None and selector.match_labels else None
        )
        """A label every pod counted carries (its selector's first ``matchLabels`` pair): a
        pod without it is passed over unmatched as pods are assumed and seen (the counts of
        64 selectors, e.g. 100 pods each with an affinity to a label of its own, were each
        matched against every pod)."""

    @classmethod
    def build(
        cls,
        ckey: CountKey,
        node_labels: Iterable[Mapping[str, str]],
        pods: Iterable[tuple[Mapping[str, str], PodInfo]],
    ) -> DomainCounts:
        """From every node's labels and (a superset of) the matching pods with their node's."""
        matcher, key, required = ckey
        out = cls(matcher, key, required)
        for labels in node_labels:
            if all(k in labels for k in required):
                out.counts[labels[key]] = 0
        for labels, pod in pods:
            value = out.domain_of(labels, pod)
            if value is not None:
                out.counts[value] += 1
        for n in out.counts.values():
            out.hist[n] = out.hist.get(n, 0) + 1
        return out

    def copy(self) -> DomainCounts:
        other = DomainCounts(self.matcher, self.key, self.required)
        other.counts = dict(self.counts)
        other.hist = dict(self.hist)
        return other

    def domain_of(self, labels: Mapping[str, str], pod: PodInfo) -> str | None:
        """The domain ``pod`` (on a node with ``labels``) counts in; ``None``: it does not."""
        value = labels.get(self.key)
        if value is None or value not in self.counts:
            return None
        for k in self.required:
            if k not in labels:
                return None
        if not self.matcher.matches_pod(pod.namespace, pod.labels, None):
            return None
        return value

    def shift(self, value: str, by: int) -> None:
        was = self.counts[value]
        now = self.counts[value] = was + by
        hist = self.hist
        left = hist[was] - 1
        if left:
            hist[was] = left
        else:
            del hist[was]
        hist[now] = hist.get(now, 0) + 1

    @property
    def least(self) -> int:
        """The count of the least-loaded domain (0 when there is none)."""
        return min(self.hist) if self.hist else 0


class TermIndex(Generic[T]):
    """Terms of placed pods (one kind: required anti-affinity, required affinity, preferred
    either way) → topology value → how many pods carrying the term sit there."""

    __slots__ = ("terms",)

    def __init__(self) -> None:
        self.terms: dict[T, dict[str, int]] = {}

    def copy(self) -> TermIndex[T]:
        other = TermIndex[T]()
        other.terms = {t: dict(v) for t, v in self.terms.items()}
        return other

    def bump(self, labels: Mapping[str, str], terms: Iterable[T], by: int) -> None:
        for term in terms:
            key = term.topology_key if isinstance(term, AffinityTerm) else term.term.topology_key
            value = labels.get(key)
            if value is None:
                continue
            values = self.terms.setdefault(term, {})
            now = values.get(value, 0) + by
            if now > 0:
                values[value] = now
            else:
                values.pop(value, None)
                if not values:
                    del self.terms[term]


class ScoringTerms:
    """The terms of placed pods that weigh on an incoming pod's score (InterPodAffinity's
    symmetric half): required affinity (at kube's hard weight), preferred affinity and preferred
    anti-affinity, each → topology value → pods carrying the term."""

    __slots__ = ("affinity", "affinity_preferred", "anti_preferred")

    def __init__(self) -> None:
        self.affinity = TermIndex[AffinityTerm]()
        self.affinity_preferred = TermIndex[WeightedAffinityTerm]()
        self.anti_preferred = TermIndex[WeightedAffinityTerm]()

    def copy(self) -> ScoringTerms:
        other = ScoringTerms()
        other.affinity = self.affinity.copy()
        other.affinity_preferred = self.affinity_preferred.copy()
        other.anti_preferred = self.anti_preferred.copy()
        return other

    def __bool__(self) -> bool:
        return bool(
            self.affinity.terms or self.affinity_preferred.terms or self.anti_preferred.terms
        )

    def bump(self, labels: Mapping[str, str], pod: PodInfo, by: int) -> None:
        if pod.affinity:
            self.affinity.bump(labels, pod.affinity, by)
        if pod.affinity_preferred:
            self.affinity_preferred.bump(labels, pod.affinity_preferred, by)
        if pod.anti_affinity_preferred:
            self.anti_preferred.bump(labels, pod.anti_affinity_preferred, by)
