"""Topology spread constraints (``spec.topologySpreadConstraints``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.core.podspec.affinity import label_selector
from coordinator.core.podspec.fields import FieldError, entry, integer, sequence, text
from coordinator.core.podspec.selectors import LabelSelector, Requirement

__all__ = ["SpreadConstraint", "spread_constraints"]


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    selector: LabelSelector | None
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"  # Honor | Ignore
    node_taints_policy: str = "Ignore"  # Honor | Ignore


def spread_constraints(
    spec: Mapping[str, object], labels: Mapping[str, str]
) -> tuple[SpreadConstraint, ...]:
    out: list[SpreadConstraint] = []
    for i, item in enumerate(sequence(spec, "topologySpreadConstraints", "spec")):
        p = f"spec.topologySpreadConstraints[{i}]"
        e = entry(item, p)
        max_skew = integer(e, "maxSkew", p)
        if max_skew is None or max_skew < 1:
            raise FieldError(f"{p}.maxSkew", "must be an integer ≥ 1")
        key = text(e, "topologyKey", p)
        if not key:
            raise FieldError(f"{p}.topologyKey", "must not be empty")
        when = text(e, "whenUnsatisfiable", p)
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise FieldError(
                f"{p}.whenUnsatisfiable",
                f"unknown value {when!r} (expected DoNotSchedule or ScheduleAnyway)",
            )
        min_domains = integer(e, "minDomains", p)
        if min_domains is not None and (min_domains < 1 or when != "DoNotSchedule"):
            raise FieldError(
                f"{p}.minDomains", "must be ≥ 1 and needs whenUnsatisfiable: DoNotSchedule"
            )
        nap = text(e, "nodeAffinityPolicy", p, "Honor")
        ntp = text(e, "nodeTaintsPolicy", p, "Ignore")
        for name, value in (("nodeAffinityPolicy", nap), ("nodeTaintsPolicy", ntp)):
            if value not in ("Honor", "Ignore"):
                raise FieldError(
                    f"{p}.{name}", f"unknown value {value!r} (expected Honor or Ignore)"
                )
        selector = label_selector(e.get("labelSelector"), f"{p}.labelSelector")
        extra = [
            Requirement(k, "In", (labels[k],))
            for k in sequence(e, "matchLabelKeys", p)
            if isinstance(k, str) and k in labels
        ]
        if selector is not None:
            selector = selector.with_extra(extra)
        out.append(SpreadConstraint(max_skew, key, when, selector, min_domains, nap, ntp))
    return tuple(out)
