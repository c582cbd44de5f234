"""``topos_watch_events_total{resource, outcome}``: the inventory's watch events, those that
changed something (``applied``) and those that changed nothing the scheduler uses
(``unchanged``: Node heartbeats, pod status churn), read from :attr:`KubeSync.events`."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from coordinator.adapters.kube.inventory_sync import KubeSync


class WatchEvents(Collector):
    def __init__(self, sync: KubeSync) -> None:
        self._sync = sync

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "topos_watch_events",
            "Inventory watch events by resource and outcome (unchanged: nothing the scheduler "
            "uses changed)",
            labels=["resource", "outcome"],
        )
        for (resource, outcome), n in sorted(self._sync.events.items()):
            family.add_metric([resource, outcome], n)
        yield family
