"""A summary with quantiles over the most recent observations, as Go clients export them: the
bare name carries ``{quantile="0.5"}``, ``0.9`` and ``0.99``, so a dashboard that graphs the
bare name (NeuroNetes' ``neuronetes_scheduler_latency_seconds``) shows latencies; ``_count`` and
``_sum`` count every observation since start."""

from __future__ import annotations

import collections
import math
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["WindowSummary"]


class WindowSummary(Collector):
    def __init__(
        self,
        name: str,
        documentation: str,
        *,
        registry: CollectorRegistry,
        window: int = 1024,
        quantiles: Sequence[float] = (0.5, 0.9, 0.99),
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.quantiles = tuple(quantiles)
        self._recent: collections.deque[float] = collections.deque(maxlen=window)
        self.count = 0
        self.sum = 0.0
        registry.register(self)

    def observe(self, value: float) -> None:
        self._recent.append(value)
        self.count += 1
        self.sum += value

    def quantile(self, q: float) -> float:
        """The nearest-rank ``q`` quantile of the recent observations (NaN when none)."""
        if not self._recent:
            return math.nan
        ordered = sorted(self._recent)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    def collect(self) -> Iterator[Metric]:
        metric = Metric(self.name, self.documentation, "summary")
        for q in self.quantiles:
            metric.add_sample(self.name, {"quantile": repr(q)}, self.quantile(q))
        metric.add_sample(f"{self.name}_count", {}, float(self.count))
        metric.add_sample(f"{self.name}_sum", {}, self.sum)
        yield metric
