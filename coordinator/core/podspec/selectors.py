"""Label selectors and node selector terms, matched the way the API machinery matches them.

- :class:`LabelSelector` (``matchLabels`` + ``matchExpressions`` with In / NotIn / Exists /
  DoesNotExist) selects pods and namespaces. An empty selector matches everything; a missing one
  (``None`` where a selector is optional) matches nothing, as in Kubernetes.
- :class:`NodeSelectorTerm` (``matchExpressions`` adding Gt / Lt, and ``matchFields`` on
  ``metadata.name``) selects nodes; a list of terms is ORed, the requirements of one term ANDed,
  and a term with no requirements matches no node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "LABEL_OPERATORS",
    "NODE_OPERATORS",
    "LabelSelector",
    "NodeSelectorTerm",
    "Requirement",
    "match_node_terms",
]

LABEL_OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
NODE_OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            value = labels.get(self.key)
            return value is not None and value in self.values
        if op == "NotIn":
            value = labels.get(self.key)
            return value is None or value not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        # Gt / Lt: the label must parse as an integer; the single value too (validated at parse).
        value = labels.get(self.key)
        if value is None:
            return False
        try:
            have = int(value)
        except ValueError:
            return False
        want = int(self.values[0])
        return have > want if op == "Gt" else have < want


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        return all(req.matches(labels) for req in self.match_expressions)

    def with_extra(self, requirements: Sequence[Requirement]) -> LabelSelector:
        """This selector ANDed with more requirements (matchLabelKeys / mismatchLabelKeys)."""
        if not requirements:
            return self
        return LabelSelector(self.match_labels, (*self.match_expressions, *requirements))


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()  # key is always "metadata.name"

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if not self.match_expressions and not self.match_fields:
            return False
        if not all(req.matches(labels) for req in self.match_expressions):
            return False
        fields = {"metadata.name": node_name}
        return all(req.matches(fields) for req in self.match_fields)


def match_node_terms(
    terms: Sequence[NodeSelectorTerm], node_name: str, labels: Mapping[str, str]
) -> bool:
    """ORed node selector terms (``requiredDuringScheduling…nodeSelectorTerms``)."""
    return any(term.matches(node_name, labels) for term in terms)
