"""Pods counted per topology domain, kept current as pods are assumed, forgotten and replaced —
kube-scheduler's PreFilter counts for PodTopologySpread and InterPodAffinity, but computed once
per selector and reused by every cycle that asks again instead of walked per pod.

- :class:`DomainCounts`: for one *matcher* (a spread constraint's selector in its namespace, or
  a pod anti-affinity term) and one topology key, the matching pods per value of that key over
  the nodes carrying every ``required`` key. Every such domain is present (zeros included) and a
  histogram of the counts gives the least-loaded domain without a walk.
- :class:`AntiAffinityIndex`: the required anti-affinity terms of the pods already placed, each
  with the topology values where pods carrying it sit (the symmetric half of anti-affinity).

A matcher must decide from a pod's namespace and labels alone (no namespace labels): terms with
a ``namespaceSelector`` that names labels are never counted here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from coordinator.core.podspec.affinity import AffinityTerm
from coordinator.core.podspec.selectors import LabelSelector
from coordinator.core.snapshot.podinfo import PodInfo

__all__ = ["AntiAffinityIndex", "CountKey", "DomainCounts", "InNamespace", "PodMatcher"]

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


# matcher, topology key, keys a node must carry for its pods to count
CountKey = tuple[PodMatcher, str, tuple[str, ...]]


class DomainCounts:
    """Matching pods per topology value, for the nodes carrying every required key."""

    __slots__ = ("counts", "hist", "key", "matcher", "required")

    def __init__(self, matcher: PodMatcher, key: str, required: tuple[str, ...]) -> None:
        self.matcher = matcher
        self.key = key
        self.required = required
        self.counts: dict[str, int] = {}
        self.hist: dict[int, int] = {}  # count → how many domains hold it

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


class AntiAffinityIndex:
    """Required anti-affinity terms of placed pods → topology value → pods carrying the term."""

    __slots__ = ("terms",)

    def __init__(self) -> None:
        self.terms: dict[AffinityTerm, dict[str, int]] = {}

    def copy(self) -> AntiAffinityIndex:
        other = AntiAffinityIndex()
        other.terms = {t: dict(v) for t, v in self.terms.items()}
        return other

    def bump(self, labels: Mapping[str, str], pod: PodInfo, by: int) -> None:
        for term in pod.anti_affinity:
            value = labels.get(term.topology_key)
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
