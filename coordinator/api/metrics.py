"""Prometheus metrics of the coordinator, on a per-app registry: the API and stream ingest
(here), the scheduler's events (:mod:`.scheduling_metrics`) and its state, read at each scrape
(:mod:`.cluster_metrics`). ``compat`` picks the seed systems' metric sets exported beside
``topos_*`` (``docs/metrics.md``).

Other parts of the coordinator register their collectors on ``app[METRICS].registry``.
"""

from __future__ import annotations

from collections.abc import Collection

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from coordinator.api.cluster_metrics import ClusterMetrics
from coordinator.api.scheduling_metrics import METRIC_SETS, SchedulingMetrics


class Metrics:
    def __init__(
        self, registry: CollectorRegistry | None = None, *, compat: Collection[str] = METRIC_SETS
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.scheduling = SchedulingMetrics(r, compat=compat)
        self.cluster = ClusterMetrics(r, compat=compat)
        self.frames = Counter(
            "topos_stream_frames", "Agent frames applied, by type", ["type"], registry=r
        )
        self.rejected = Counter(
            "topos_stream_rejected",
            "Agent streams closed for bad input, by reason",
            ["reason"],
            registry=r,
        )
        self.connections = Gauge(
            "topos_stream_connections",
            "Open agent stream WebSockets (before and after hello)",
            registry=r,
        )
        self.ingest_seconds = Histogram(
            "topos_stream_ingest_seconds",
            "Time to decode and apply one agent frame",
            buckets=(1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1),
            registry=r,
        )
        self.nodes = Gauge(
            "topos_inventory_nodes",
            "Nodes in the inventory, by state (annotation_topology: no agent stream, scheduled"
            " from the topology published on the Node)",
            ["state"],
            registry=r,
        )
        self.gpu_mismatches = Counter(
            "topos_gpu_assignment_mismatches",
            "Pods the node gave other GPUs than Topos assigned (one per new or changed mismatch),"
            " by node and by how the link class of the devices given compares with the assigned",
            ["node", "link"],
            registry=r,
        )
