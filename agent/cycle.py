"""One node's agent: the discovery cycle and the loop that repeats it.

A cycle discovers (in a worker thread), marks the GPUs that NVML events condemned, computes the
labels, hands the snapshot and the kubelet's allocations to the stream client, and publishes the
labels to the Node. ``Agent.run_cycles`` repeats it every ``interval_s`` and at once when woken
(an NVML event that changed a GPU's health).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from agent.health import GpuEvent, HealthLedger
from agent.health_monitor import HealthMonitor, summary
from agent.metrics import AgentMetrics
from agent.models import models_annotation, scan_model_cache
from agent.podresources import ContainerAllocation, PodResourcesClient, PodResourcesError
from agent.publish import Condition, NodeNotFound, NodePublisher, PublishResult
from agent.settings import AgentSettings
from agent.stream import StreamClient
from common import labels as L
from common import wire
from common.labeling import labels
from common.labels import NodeLabels
from common.model import NodeTopology

if TYPE_CHECKING:
    from agent.devices import DeviceSource

log = logging.getLogger("topos.agent")


def to_wire(allocations: Sequence[ContainerAllocation]) -> tuple[wire.ContainerAllocation, ...]:
    """PodResources records → stream records (containers holding nothing are left out)."""
    out = []
    for c in allocations:
        devices = tuple(
            wire.DeviceAllocation(
                resource=d.resource_name, ids=d.device_ids, numa_nodes=d.numa_nodes
            )
            for d in c.devices
            if d.device_ids
        )
        if devices or c.cpu_ids:
            out.append(
                wire.ContainerAllocation(
                    namespace=c.namespace,
                    pod=c.pod,
                    container=c.container,
                    devices=devices,
                    cpus=c.cpu_ids,
                )
            )
    return tuple(out)


_MESSAGE_MAX = 1024


def health_condition(topology: NodeTopology) -> Condition | None:
    """The ``ToposGPUHealthy`` Node condition for this snapshot (``None``: a node without GPUs)."""
    if not topology.gpus:
        return None
    status, message = summary(topology)
    if len(message) > _MESSAGE_MAX:
        message = message[: _MESSAGE_MAX - 1] + "…"
    reason = {"ok": "GPUsHealthy", "degraded": "GPUDegraded", "unhealthy": "GPUUnhealthy"}[status]
    return Condition(
        type=L.GPU_HEALTH_CONDITION,
        status="True" if status == "ok" else "False",
        reason=reason,
        message=message,
    )


@dataclass(frozen=True, slots=True)
class CycleResult:
    topology: NodeTopology
    labels: NodeLabels
    publish: PublishResult | None


class Agent:
    """One node's agent. ``await agent.cycle()`` is one discovery+publish."""

    def __init__(
        self,
        settings: AgentSettings,
        *,
        source: DeviceSource,
        publisher: NodePublisher | None,
        podresources: PodResourcesClient | None = None,
        stream: StreamClient | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.source = source
        self.publisher = publisher
        self.podresources = podresources
        self.stream = stream
        self.metrics = AgentMetrics()
        self.ledger = HealthLedger()
        self.monitor = HealthMonitor(settings.health_thresholds)
        self._clock = clock
        self.ready = False
        self.last_error: str | None = None
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._podresources_warned = False
        self._cache_warned = False

    async def discover(self) -> NodeTopology:
        started = time.perf_counter()
        topology = await asyncio.to_thread(self.source.discover)
        self.metrics.discovery_seconds.observe(time.perf_counter() - started)
        return self.monitor.observe(self.ledger.apply(topology), self._clock())

    async def allocations(self) -> tuple[wire.ContainerAllocation, ...]:
        if self.podresources is None:
            return ()
        try:
            return to_wire(await self.podresources.list())
        except PodResourcesError as exc:
            if not self._podresources_warned:
                log.warning("allocations unavailable", extra={"error": str(exc)})
                self._podresources_warned = True
            return ()

    async def cycle(self) -> CycleResult:
        """Discover, label, publish, stream. Raises on failure (the loop counts and logs it)."""
        topology = await self.discover()
        self.metrics.gpus_total.set(len(topology.gpus))
        self.metrics.gpus_healthy.set(sum(1 for g in topology.gpus if g.healthy))
        for status in ("ok", "degraded", "unhealthy"):
            self.metrics.gpu_health.labels(status).set(
                sum(1 for g in topology.gpus if g.health is not None and g.health.status == status)
            )
        desired = labels(topology, self.settings.labeling)
        if self.settings.model_cache_dir is not None:
            desired = await self.with_models(desired, self.settings.model_cache_dir)
        if self.stream is not None:  # the coordinator hears of it even when the API server is down
            self.stream.publish(topology, await self.allocations())
        result: PublishResult | None = None
        if self.publisher is not None:
            try:
                result = await self.publisher.publish(
                    desired,
                    health_condition(topology),
                    datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                )
            except Exception:
                self.metrics.publish_total.labels("error").inc()
                self.metrics.publish_errors.inc()
                raise
            self.metrics.publish_total.labels("patched" if result.patched else "unchanged").inc()
        self.ready = True
        self.last_error = None
        return CycleResult(topology=topology, labels=desired, publish=result)

    async def with_models(self, desired: NodeLabels, root: str) -> NodeLabels:
        """``desired`` plus ``topos.io/models`` from a scan of ``root`` (in a worker thread)."""
        models = await asyncio.to_thread(scan_model_cache, root)
        missing = not models and not await asyncio.to_thread(os.path.isdir, root)
        if missing and not self._cache_warned:
            log.warning("model cache directory missing", extra={"path": root})
            self._cache_warned = True
        annotations = {**desired.annotations, L.MODELS: models_annotation(models)}
        return NodeLabels(labels=desired.labels, annotations=annotations)

    async def on_event(self, event: GpuEvent) -> None:
        self.metrics.nvml_events.labels("true" if event.fatal else "false").inc()
        if event.xid is not None:
            self.monitor.record_xid(event.uuid, event.xid)
        changed = self.ledger.record(event)
        log.warning(
            "NVML event",
            extra={"gpu": event.uuid, "reason": event.reason, "fatal": event.fatal},
        )
        if changed:
            self.wake()

    def wake(self) -> None:
        """Run the next cycle now instead of at the end of the interval."""
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    async def run_cycles(self) -> None:
        """Cycle every ``interval_s`` and whenever woken, until ``stop()``."""
        while not self._stopping.is_set():
            try:
                await self.cycle()
            except NodeNotFound as exc:
                self.ready = False
                self.last_error = str(exc)
                log.error("publish failed", extra={"error": str(exc)})
            except Exception as exc:  # a daemon keeps going; the error is logged and counted
                self.ready = False
                self.metrics.cycle_errors.inc()
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.error("discovery cycle failed", extra={"error": self.last_error})
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.interval_s):
                    await self._wake.wait()
            self._wake.clear()
