"""Node affinity and pod (anti-)affinity (``spec.affinity``), and the label selectors they use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coordinator.core.podspec.fields import FieldError, entry, integer, sequence, str_map, text
from coordinator.core.podspec.selectors import (
    LABEL_OPERATORS,
    NODE_OPERATORS,
    LabelSelector,
    NodeSelectorTerm,
    Requirement,
)

__all__ = [
    "AffinityTerm",
    "NodeAffinity",
    "WeightedAffinityTerm",
    "WeightedNodeTerm",
    "label_selector",
    "node_affinity",
    "node_selector",
    "parse_affinity_terms",
]


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    required: tuple[NodeSelectorTerm, ...] | None = None  # None: no requirement
    preferred: tuple[WeightedNodeTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class WeightedNodeTerm:
    weight: int
    term: NodeSelectorTerm


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """One pod (anti-)affinity term, with ``matchLabelKeys``/``mismatchLabelKeys`` folded into
    the selector and the namespace rule resolved as far as it can be without namespace labels."""

    selector: LabelSelector | None  # None selects no pod
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None  # None: only ``namespaces``; empty: all namespaces
    topology_key: str

    def matches_namespace(self, namespace: str, ns_labels: Mapping[str, str] | None) -> bool:
        if namespace in self.namespaces:
            return True
        if self.namespace_selector is None:
            return False
        if self.namespace_selector.is_empty:
            return True
        return self.namespace_selector.matches(ns_labels or {})

    def matches_pod(
        self, namespace: str, labels: Mapping[str, str], ns_labels: Mapping[str, str] | None
    ) -> bool:
        if self.selector is None:
            return False
        return self.matches_namespace(namespace, ns_labels) and self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class WeightedAffinityTerm:
    weight: int
    term: AffinityTerm


def _requirements(
    items: Sequence[object], path: str, operators: frozenset[str]
) -> tuple[Requirement, ...]:
    out: list[Requirement] = []
    for i, item in enumerate(items):
        p = f"{path}[{i}]"
        e = entry(item, p)
        key = text(e, "key", p)
        op = text(e, "operator", p)
        if not key:
            raise FieldError(f"{p}.key", "must not be empty")
        if op not in operators:
            raise FieldError(
                f"{p}.operator",
                f"unknown operator {op!r} (expected {', '.join(sorted(operators))})",
            )
        values = tuple(str(v) for v in sequence(e, "values", p))
        if op in ("In", "NotIn") and not values:
            raise FieldError(f"{p}.values", f"must not be empty for {op}")
        if op in ("Exists", "DoesNotExist") and values:
            raise FieldError(f"{p}.values", f"must be empty for {op}")
        if op in ("Gt", "Lt"):
            if len(values) != 1:
                raise FieldError(f"{p}.values", f"{op} takes exactly one value")
            try:
                int(values[0])
            except ValueError:
                raise FieldError(
                    f"{p}.values", f"{op} takes an integer, got {values[0]!r}"
                ) from None
        out.append(Requirement(key, op, values))
    return tuple(out)


def label_selector(raw: object, path: str) -> LabelSelector | None:
    if raw is None:
        return None
    e = entry(raw, path)
    match_labels = tuple(sorted(str_map(e, "matchLabels", path).items()))
    exprs = _requirements(
        sequence(e, "matchExpressions", path), f"{path}.matchExpressions", LABEL_OPERATORS
    )
    return LabelSelector(match_labels, exprs)


def _node_term(raw: object, path: str) -> NodeSelectorTerm:
    e = entry(raw, path)
    exprs = _requirements(
        sequence(e, "matchExpressions", path), f"{path}.matchExpressions", NODE_OPERATORS
    )
    fields = _requirements(sequence(e, "matchFields", path), f"{path}.matchFields", NODE_OPERATORS)
    for i, req in enumerate(fields):
        if req.key != "metadata.name":
            raise FieldError(f"{path}.matchFields[{i}].key", "only metadata.name is supported")
        if req.operator not in ("In", "NotIn") or len(req.values) != 1:
            raise FieldError(
                f"{path}.matchFields[{i}]", "metadata.name takes In or NotIn with one value"
            )
    return NodeSelectorTerm(exprs, fields)


def node_selector(raw: object, path: str) -> tuple[NodeSelectorTerm, ...]:
    """A ``NodeSelector`` (``{nodeSelectorTerms: [...]}``, at least one term): its ORed terms."""
    terms = sequence(entry(raw, path), "nodeSelectorTerms", path)
    if not terms:
        raise FieldError(f"{path}.nodeSelectorTerms", "must not be empty")
    return tuple(_node_term(t, f"{path}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms))


def node_affinity(raw: Mapping[str, object], path: str) -> NodeAffinity | None:
    if not raw:
        return None
    required: tuple[NodeSelectorTerm, ...] | None = None
    req = raw.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req is not None:
        required = node_selector(req, f"{path}.requiredDuringSchedulingIgnoredDuringExecution")
    preferred: list[WeightedNodeTerm] = []
    ppath = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    for i, item in enumerate(
        sequence(raw, "preferredDuringSchedulingIgnoredDuringExecution", path)
    ):
        p = f"{ppath}[{i}]"
        e = entry(item, p)
        weight = _weight(e, p)
        preferred.append(
            WeightedNodeTerm(weight, _node_term(e.get("preference"), f"{p}.preference"))
        )
    return NodeAffinity(required, tuple(preferred))


def _weight(e: Mapping[str, object], path: str) -> int:
    weight = integer(e, "weight", path)
    if weight is None or not 1 <= weight <= 100:
        raise FieldError(f"{path}.weight", "must be an integer from 1 to 100")
    return weight


def _affinity_term(
    raw: object, path: str, namespace: str, labels: Mapping[str, str]
) -> AffinityTerm:
    e = entry(raw, path)
    topology_key = text(e, "topologyKey", path)
    if not topology_key:
        raise FieldError(f"{path}.topologyKey", "must not be empty")
    selector = label_selector(e.get("labelSelector"), f"{path}.labelSelector")
    extra: list[Requirement] = []
    for key in sequence(e, "matchLabelKeys", path):
        if isinstance(key, str) and key in labels:
            extra.append(Requirement(key, "In", (labels[key],)))
    for key in sequence(e, "mismatchLabelKeys", path):
        if isinstance(key, str) and key in labels:
            extra.append(Requirement(key, "NotIn", (labels[key],)))
    if selector is not None:
        selector = selector.with_extra(extra)
    namespaces = frozenset(str(n) for n in sequence(e, "namespaces", path))
    ns_selector = label_selector(e.get("namespaceSelector"), f"{path}.namespaceSelector")
    if not namespaces and ns_selector is None:
        namespaces = frozenset({namespace})
    return AffinityTerm(selector, namespaces, ns_selector, topology_key)


def parse_affinity_terms(
    raw: Mapping[str, object], path: str, namespace: str, labels: Mapping[str, str]
) -> tuple[tuple[AffinityTerm, ...], tuple[WeightedAffinityTerm, ...]]:
    """Required and preferred terms of one ``podAffinity``/``podAntiAffinity`` block."""
    req = tuple(
        _affinity_term(
            t, f"{path}.requiredDuringSchedulingIgnoredDuringExecution[{i}]", namespace, labels
        )
        for i, t in enumerate(sequence(raw, "requiredDuringSchedulingIgnoredDuringExecution", path))
    )
    pref: list[WeightedAffinityTerm] = []
    for i, item in enumerate(
        sequence(raw, "preferredDuringSchedulingIgnoredDuringExecution", path)
    ):
        p = f"{path}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        e = entry(item, p)
        pref.append(
            WeightedAffinityTerm(
                _weight(e, p),
                _affinity_term(e.get("podAffinityTerm"), f"{p}.podAffinityTerm", namespace, labels),
            )
        )
    return req, tuple(pref)
