"""The agent's Prometheus metrics (served at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agent.stream import StreamState


class AgentMetrics:
    """The agent's Prometheus metrics, on a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.discovery_seconds = Histogram(
            "topos_agent_discovery_seconds",
            "Time to discover the node's hardware (one snapshot).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.publish_total = Counter(
            "topos_agent_publish_total",
            "Publish attempts by outcome: patched (something changed), unchanged, error.",
            ["result"],
            registry=self.registry,
        )
        self.publish_errors = Counter(
            "topos_agent_publish_errors_total",
            "Publish attempts that failed.",
            registry=self.registry,
        )
        self.cycle_errors = Counter(
            "topos_agent_cycle_errors_total",
            "Discovery cycles that failed before publishing.",
            registry=self.registry,
        )
        self.stream_state = Gauge(
            "topos_agent_stream_state",
            "1 for the stream client's current state, 0 for the others.",
            ["state"],
            registry=self.registry,
        )
        self.gpus_healthy = Gauge(
            "topos_agent_gpus_healthy", "Healthy GPUs in the last snapshot.", registry=self.registry
        )
        self.gpus_total = Gauge(
            "topos_agent_gpus", "GPUs in the last snapshot.", registry=self.registry
        )
        self.gpu_health = Gauge(
            "topos_agent_gpu_health",
            "GPUs by the health verdict of the last snapshot (docs/health.md).",
            ["status"],
            registry=self.registry,
        )
        self.nvml_events = Counter(
            "topos_agent_nvml_events_total",
            "NVML events received, by whether they made a GPU unhealthy.",
            ["fatal"],
            registry=self.registry,
        )
        for state in StreamState:
            self.stream_state.labels(state.value).set(0)

    def set_stream_state(self, state: StreamState) -> None:
        for s in StreamState:
            self.stream_state.labels(s.value).set(1 if s is state else 0)
