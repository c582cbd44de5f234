"""Just enough PromQL to check what a dashboard would show from two scrapes of ``/metrics``,
parsed with ``prometheus_client``'s own text parser: instant selectors (summed, or per series),
``rate()`` between two scrapes, and ``histogram_quantile`` over a histogram's buckets."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Scrape", "histogram_quantile", "rate"]

Series = tuple[str, frozenset[tuple[str, str]]]


@dataclass(frozen=True, slots=True)
class Scrape:
    at: float  # seconds (monotonic)
    samples: Mapping[Series, float]
    types: Mapping[str, str]  # family name → counter | gauge | histogram | summary

    @classmethod
    def parse(cls, text: str, at: float) -> Scrape:
        samples: dict[Series, float] = {}
        types: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            types[family.name] = family.type
            for s in family.samples:
                samples[(s.name, frozenset(s.labels.items()))] = s.value
        return cls(at, samples, types)

    def names(self) -> set[str]:
        return {name for name, _ in self.samples}

    def series(self, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
        """``name{labels…}``: every matching series by its labels."""
        want = set(labels.items())
        return {lbl: v for (n, lbl), v in self.samples.items() if n == name and want <= set(lbl)}

    def value(self, name: str, **labels: str) -> float:
        """``sum(name{labels…})``; a selector matching nothing is an error (an empty panel)."""
        found = self.series(name, **labels)
        assert found, f"{name}{labels or ''} selects nothing"
        return sum(found.values())


def rate(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    """``sum(rate(name{labels…}[window]))`` with the window spanning the two scrapes."""
    return (after.value(name, **labels) - before.value(name, **labels)) / (after.at - before.at)


def histogram_quantile(q: float, before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    """``histogram_quantile(q, sum by (le) (rate(name_bucket{labels…}[window])))``, with
    Prometheus's linear interpolation inside the bucket."""
    buckets: dict[float, float] = {}
    for lbl, value in after.series(f"{name}_bucket", **labels).items():
        le = float(dict(lbl)["le"])
        old = before.series(f"{name}_bucket", **dict(lbl)).get(lbl, 0.0)
        buckets[le] = buckets.get(le, 0.0) + value - old
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total == 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower
