"""Runs the scheduler inside the coordinator's aiohttp application (a ``cleanup_ctx``).

Config file sections read here (``topos coordinator --config F``):

``scheduling``  the scoring weights and plugin choices (``coordinator.core.load_config``).
``scheduler``   the runtime::

    scheduler:
      enabled: true            # false: serve the API only, never bind
      namespace: ml            # only pods of this namespace (default: every namespace)
      nodeSelector: {pool: gpu}  # only onto nodes with these labels (default: every node)
      maxBindsInFlight: 64     # binds pipelined while the next pod is scheduled

``kube``        the scheduler's API-server clients::

    kube:
      qps: 50                  # client-side requests per second (0: no client-side limit)
      burst: 100               # requests at once after a quiet spell

The defaults are kube-scheduler's (``clientConnection.qps``/``burst``). As in kube-scheduler,
Events go through a second client with the same limit, so explaining never takes a bind's turn.

On Kubernetes the loop starts after the inventory's first sync (GPU assignments of bound pods are
known before anything is placed) and, with leader election on, only while this replica leads.
With ``--in-memory`` the runtime runs over a :class:`~.memory_cluster.MemoryCluster`, so explain
and simulate work on what the agents report.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from common.kube import ClientSettings, KubeClient, RateLimit
from coordinator.adapters.kube.runtime import kube_gang_runtime, kube_runtime
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.api.explain import SCHEDULER, SchedulerSlot
from coordinator.api.gangs import GANGS, GangSlot  # gangs_runtime (issue 6)
from coordinator.api.keys import INVENTORY, READINESS
from coordinator.app.leadership import LEADER
from coordinator.core.framework.config import load_config
from coordinator.core.registry import build_framework
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.loop import RuntimeSettings
from coordinator.inventory.state import NodeState

log = logging.getLogger(__name__)

__all__ = ["KubeSection", "RuntimeSection", "install_scheduler"]

DEFAULT_QPS = 50.0
DEFAULT_BURST = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeSection:
    """The ``kube`` section: client-side rate limit of the scheduler's API-server clients."""

    rate_limit: RateLimit | None = field(
        default_factory=lambda: RateLimit(qps=DEFAULT_QPS, burst=DEFAULT_BURST)
    )
    """``None``: no client-side limit (``qps: 0``)."""

    @classmethod
    def from_config(cls, raw: object) -> KubeSection:
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ValueError("kube: must be a mapping")
        known = {"qps", "burst"}
        for key in raw:
            if key not in known:
                raise ValueError(f"kube.{key}: unknown key (expected {', '.join(sorted(known))})")
        qps = raw.get("qps", DEFAULT_QPS)
        if isinstance(qps, bool) or not isinstance(qps, int | float) or not qps >= 0:
            raise ValueError(f"kube.qps: must be a number >= 0 (0: no limit), not {qps!r}")
        burst = raw.get("burst", DEFAULT_BURST)
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise ValueError(f"kube.burst: must be an integer >= 1, not {burst!r}")
        if qps == 0:
            return cls(rate_limit=None)
        try:
            return cls(rate_limit=RateLimit(qps=float(qps), burst=burst))
        except ValueError as exc:
            raise ValueError(f"kube: {exc}") from None

    def client_settings(self) -> ClientSettings:
        return ClientSettings(rate_limit=self.rate_limit)


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeSection:
    enabled: bool = True
    """Run the scheduling loop (false: the API only)."""
    namespace: str | None = None
    """Only pods of this namespace; ``None``: every namespace."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """Only nodes carrying all these labels."""
    max_binds_in_flight: int = 64
    """Binds pipelined while the next pod is scheduled."""

    @classmethod
    def from_config(cls, raw: object) -> RuntimeSection:
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ValueError("scheduler: must be a mapping")
        known = {"enabled", "namespace", "nodeSelector", "maxBindsInFlight"}
        for key in raw:
            if key not in known:
                raise ValueError(
                    f"scheduler.{key}: unknown key (expected {', '.join(sorted(known))})"
                )
        enabled = raw.get("enabled", True)
        if not isinstance(enabled, bool):
            raise ValueError("scheduler.enabled: must be true or false")
        namespace = raw.get("namespace")
        if namespace is not None and (not isinstance(namespace, str) or not namespace):
            raise ValueError("scheduler.namespace: must be a namespace name")
        selector = raw.get("nodeSelector") or {}
        if not isinstance(selector, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in selector.items()
        ):
            raise ValueError("scheduler.nodeSelector: must map label names to strings")
        binds = raw.get("maxBindsInFlight", 64)
        if isinstance(binds, bool) or not isinstance(binds, int) or not 1 <= binds <= 4096:
            raise ValueError("scheduler.maxBindsInFlight: must be an integer from 1 to 4096")
        return cls(
            enabled=enabled,
            namespace=namespace,
            node_selector=dict(selector),
            max_binds_in_flight=binds,
        )

    def node_filter(self) -> Callable[[NodeState], bool] | None:
        if not self.node_selector:
            return None
        wanted = dict(self.node_selector)
        return lambda node: all(node.labels.get(k) == v for k, v in wanted.items())


def _context(
    extra: Mapping[str, Any], *, kubeconfig: str | None, in_memory: bool
) -> Callable[[web.Application], AsyncIterator[None]]:
    section = RuntimeSection.from_config(extra.get("scheduler"))
    kube = KubeSection.from_config(extra.get("kube"))
    framework = build_framework(load_config(extra.get("scheduling")))
    settings = RuntimeSettings(max_binds_in_flight=section.max_binds_in_flight)
    gang_settings = GangSettings.from_config(extra.get("gangs"))  # gangs_runtime (issue 6)

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        slot = app[SCHEDULER]
        inventory = app[INVENTORY]
        client: KubeClient | None = None
        events: KubeClient | None = None
        if in_memory:
            runtime = memory_runtime(
                inventory, MemoryCluster(inventory), framework=framework, settings=settings
            )
        else:
            client = await KubeClient.connect(kubeconfig, settings=kube.client_settings())
            events = await KubeClient.connect(kubeconfig, settings=kube.client_settings())
            readiness = app[READINESS]
            synced = _until(lambda: bool(readiness.checks.get("inventory")))
            runtime = kube_runtime(
                client,
                inventory,
                inventory_synced=synced,
                framework=framework,
                settings=settings,
                namespace=section.namespace,
                events_client=events,
            )
        runtime.scheduler.view.node_filter = section.node_filter()
        elector = app.get(LEADER)
        if elector is not None:
            # Only the leader binds: start once leading, and check before every bind.
            runtime.add_gate(_until(elector.is_leader))
            runtime.scheduler.binder.may_bind = elector.is_leader
        # gangs_runtime (issue 6): the gang step, preemption and recovery on this scheduler.
        if client is not None:
            gangs = kube_gang_runtime(
                runtime, client, settings=gang_settings, namespace=section.namespace
            )
        else:
            gangs = GangRuntime(runtime, settings=gang_settings)
        app[GANGS].step = gangs.step
        await gangs.start()
        slot.scheduler = runtime.scheduler
        await runtime.start()
        try:
            yield
        finally:
            slot.scheduler = None
            app[GANGS].step = None
            await gangs.stop()
            await runtime.stop()
            for opened in (client, events):
                if opened is not None:
                    await opened.close()

    return ctx


def _until(condition: Callable[[], bool]) -> asyncio.Event:
    event = asyncio.Event()

    async def poll() -> None:
        # Readiness flags and leadership are plain state owned elsewhere: poll them.
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        event.set()

    task = asyncio.get_running_loop().create_task(poll())
    _GATES.add(task)
    task.add_done_callback(_GATES.discard)
    return event


_GATES: set[asyncio.Task[None]] = set()


def install_scheduler(
    app: web.Application,
    extra: Mapping[str, Any],
    *,
    kubeconfig: str | None = None,
    in_memory: bool = False,
) -> None:
    """Give ``app`` the scheduler slot the explain/simulate routes read, and — unless the
    ``scheduler`` section disables it — the runtime as a ``cleanup_ctx``. Raises ``ValueError``
    for a bad ``scheduler``/``scheduling``/``kube`` section."""
    app[SCHEDULER] = SchedulerSlot()
    section = RuntimeSection.from_config(extra.get("scheduler"))
    KubeSection.from_config(extra.get("kube"))  # a bad `kube` section fails at start-up
    # gangs_runtime (issue 6): the gang routes' slot; `gangs` config section checked here.
    app[GANGS] = GangSlot(keys=GangSettings.from_config(extra.get("gangs")).keys)
    ctx = _context(extra, kubeconfig=kubeconfig, in_memory=in_memory)
    if section.enabled:
        app.cleanup_ctx.append(ctx)
