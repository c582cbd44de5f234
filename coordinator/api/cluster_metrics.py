"""The scheduler's state metrics, read at every scrape: pending pods by queue, gangs by phase,
GPU utilisation and fragmentation per domain, the cluster's GPU allocation ratio, DRA objects
left out — as
``topos_*`` names and, when their compatibility set is on, the seed systems' names.

:func:`read_cluster` gathers what the scrape shows from the running scheduler, its gang step and
the domains summary; :meth:`ClusterMetrics.refresh` sets the gauges (series of domains or
queues that disappeared go away with them).
"""

from __future__ import annotations

import collections
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge

from coordinator.api.scheduling_metrics import METRIC_SETS
from coordinator.core.domains.summary import DomainsSummary, DomainUsage
from coordinator.engine.gangs.step import GangStep
from coordinator.engine.loop import Scheduler

__all__ = ["QUEUES", "ClusterMetrics", "ClusterReading", "read_cluster"]

#: kube-scheduler's queues: ``active`` (ready, or being tried now), ``backoff`` (failed recently,
#: waiting out its backoff), ``unschedulable`` (waiting for the cluster to change, or for an edit).
QUEUES = ("active", "backoff", "unschedulable")
_QUEUE_OF = {
    "active": "active",
    "in_flight": "active",
    "backoff": "backoff",
    "unschedulable": "unschedulable",
}
GANG_PHASES = ("Pending", "Waiting", "Reserved", "Bound", "TimedOut")


@dataclass(frozen=True, slots=True)
class ClusterReading:
    """What one scrape shows. ``pending`` is ``None`` while no scheduler runs."""

    pending: Mapping[str, int] | None
    gangs: Mapping[str, int] | None
    domains: DomainsSummary
    #: DRA objects left out now, by kind (``None`` while no scheduler runs)
    dra_rejected: Mapping[str, int] | None = None


def read_cluster(
    scheduler: Scheduler | None, step: GangStep | None, domains: DomainsSummary
) -> ClusterReading:
    pending: dict[str, int] | None = None
    if scheduler is not None:
        pending = dict.fromkeys(QUEUES, 0)
        for entry in scheduler.queue.entries():
            queue = _QUEUE_OF.get(entry.where)
            if queue is not None:
                pending[queue] += 1
    gangs: dict[str, int] | None = None
    if step is not None:
        gangs = dict.fromkeys(GANG_PHASES, 0)
        gangs.update(collections.Counter(s.phase for s in step.manager.statuses()))
    rejected = scheduler.view.dra.rejected_now() if scheduler is not None else None
    return ClusterReading(pending, gangs, domains, rejected)


def _tiers(summary: DomainsSummary) -> list[DomainUsage]:
    return [*summary.leaves, *summary.spines, *summary.zones]


class ClusterMetrics:
    """Gauges set from a :class:`ClusterReading` just before each scrape."""

    def __init__(self, registry: CollectorRegistry, *, compat: Collection[str] = METRIC_SETS):
        r = registry
        self.pending = Gauge(
            "topos_pending_pods", "Pods waiting to be scheduled, by queue", ["queue"], registry=r
        )
        self.gangs = Gauge("topos_gangs", "Gangs (pod groups) by phase", ["phase"], registry=r)
        self.utilisation = Gauge(
            "topos_domain_gpu_utilization_ratio",
            "GPUs in use / healthy GPUs, per network domain",
            ["tier", "domain"],
            registry=r,
        )
        self.fragmentation = Gauge(
            "topos_domain_fragmentation_ratio",
            "Idle GPUs stranded on partly-used nodes / free GPUs, per network domain",
            ["tier", "domain"],
            registry=r,
        )
        self.allocation = Gauge(
            "topos_gpu_allocation_ratio", "GPUs in use / healthy GPUs, whole cluster", registry=r
        )
        self.gpus = Gauge(
            "topos_gpus",
            "GPUs in the cluster by state: used, free, unhealthy",
            ["state"],
            registry=r,
        )
        self.dra_rejected = Gauge(
            "topos_dra_rejected_objects",
            "DRA objects left out because they are malformed (ResourceSlice, DeviceClass,"
            " ResourceClaim) and ResourcePools not used (duplicate device names, slices missing),"
            " by kind",
            ["kind"],
            registry=r,
        )
        self._neuronetes = "neuronetes" in compat
        self._topology = "topology-scheduler" in compat
        if self._neuronetes:
            self.nn_pending = Gauge(
                "neuronetes_scheduler_pending_pods", "Pods waiting to be scheduled", registry=r
            )
            self.nn_gpu = Gauge(
                "neuronetes_gpu_utilization_percent",
                "GPUs allocated to pods, percent of healthy GPUs",
                registry=r,
            )
        if self._topology:
            self.tp_domain = Gauge(
                "topology_domain_utilization_ratio",
                "GPUs in use / healthy GPUs, per network domain",
                ["tier", "domain"],
                registry=r,
            )
            self.tp_allocation = Gauge(
                "topology_gpu_allocation_ratio", "GPUs in use / healthy GPUs", registry=r
            )
            self.tp_fragmentation = Gauge(
                "topology_scheduler_domain_fragmentation_ratio",
                "Idle GPUs stranded on partly-used nodes / free GPUs, per network domain",
                ["tier", "domain"],
                registry=r,
            )

    def refresh(self, reading: ClusterReading) -> None:
        self.pending.clear()
        if reading.pending is not None:
            for queue, count in reading.pending.items():
                self.pending.labels(queue).set(count)
        self.gangs.clear()
        if reading.gangs is not None:
            for phase, count in reading.gangs.items():
                self.gangs.labels(phase).set(count)
        self.dra_rejected.clear()
        for kind, count in (reading.dra_rejected or {}).items():
            self.dra_rejected.labels(kind).set(count)
        cluster = reading.domains.cluster
        self.allocation.set(cluster.utilisation)
        self.gpus.labels("used").set(cluster.gpus_used)
        self.gpus.labels("free").set(cluster.gpus_free)
        self.gpus.labels("unhealthy").set(cluster.gpus_unhealthy)
        domains = _tiers(reading.domains)
        self.utilisation.clear()
        self.fragmentation.clear()
        for d in domains:
            self.utilisation.labels(d.kind, d.name).set(d.utilisation)
            self.fragmentation.labels(d.kind, d.name).set(d.fragmentation_ratio)
        if self._neuronetes:
            self.nn_pending.set(sum((reading.pending or {}).values()))
            self.nn_gpu.set(round(cluster.utilisation * 100, 2))
        if self._topology:
            self.tp_allocation.set(cluster.utilisation)
            self.tp_domain.clear()
            self.tp_fragmentation.clear()
            for d in domains:
                self.tp_domain.labels(d.kind, d.name).set(d.utilisation)
                self.tp_fragmentation.labels(d.kind, d.name).set(d.fragmentation_ratio)
