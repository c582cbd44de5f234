"""The runtime assembled: a :class:`~.loop.Scheduler` with the feeds that fill its queue, as
one async context manager.

On Kubernetes (:meth:`SchedulerRuntime.on_kube`) the feed is the pending-pod watch and the
scheduler starts only once the inventory has synced from the API server (so GPU assignments of
bound pods are known before anything is placed) and the first list of pending pods is in. In
memory (:meth:`SchedulerRuntime.in_memory`) the :class:`~.memory_cluster.MemoryCluster` feeds
the queue directly::

    async with SchedulerRuntime.in_memory(inventory, cluster) as runtime:
        cluster.create_pod(manifest)
        await runtime.settle()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Self

from common import podkeys
from common.kube import KubeClient
from coordinator.adapters.kube.pending import PendingWatcher
from coordinator.adapters.kube.writer import KubeClusterWriter
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.core.framework.profile import Framework
from coordinator.engine.loop import PostFilterHook, RuntimeSettings, Scheduler
from coordinator.engine.view import ClusterView
from coordinator.inventory.store import Inventory

log = logging.getLogger(__name__)
_DRAIN_ON_STOP_S = 5.0

__all__ = ["SchedulerRuntime"]


class SchedulerRuntime:
    def __init__(
        self,
        scheduler: Scheduler,
        *,
        feeds: Sequence[Callable[[], Coroutine[Any, Any, None]]] = (),
        ready: Sequence[asyncio.Event] = (),
        detach: Callable[[], None] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self._feeds = tuple(feeds)
        self._ready = list(ready)
        self._detach = detach
        self._tasks: list[asyncio.Task[None]] = []
        self.started = asyncio.Event()  # set once the loop runs (after the initial sync)

    @classmethod
    def in_memory(
        cls,
        inventory: Inventory,
        cluster: MemoryCluster,
        *,
        framework: Framework | None = None,
        settings: RuntimeSettings | None = None,
        post_filter: Sequence[PostFilterHook] = (),
    ) -> SchedulerRuntime:
        scheduler = Scheduler(
            view=ClusterView(inventory),
            writer=cluster,
            framework=framework,
            settings=settings,
            post_filter=post_filter,
        )
        detach = cluster.attach(scheduler.queue)
        return cls(scheduler, detach=detach)

    @classmethod
    def on_kube(
        cls,
        client: KubeClient,
        inventory: Inventory,
        *,
        inventory_synced: asyncio.Event | None = None,
        framework: Framework | None = None,
        settings: RuntimeSettings | None = None,
        post_filter: Sequence[PostFilterHook] = (),
        scheduler_name: str = podkeys.SCHEDULER_NAME,
        namespace: str | None = None,
        instance: str = "topos",
        events_client: KubeClient | None = None,
    ) -> SchedulerRuntime:
        """``inventory_synced``: set by whoever runs ``KubeSync`` once Nodes and bound pods are
        listed; scheduling waits for it. ``events_client``: Events go through it (default:
        ``client``), as kube-scheduler's go through their own client and rate limit."""
        scheduler = Scheduler(
            view=ClusterView(inventory),
            writer=KubeClusterWriter(client, instance=instance, events=events_client),
            framework=framework,
            settings=settings,
            post_filter=post_filter,
        )
        watcher = PendingWatcher(
            client, scheduler.queue, scheduler_name=scheduler_name, namespace=namespace
        )
        ready = [watcher.synced] + ([inventory_synced] if inventory_synced is not None else [])
        return cls(scheduler, feeds=[watcher.run], ready=ready)

    def add_gate(self, event: asyncio.Event) -> None:
        """Scheduling also waits for ``event`` (e.g. leadership) before it starts."""
        self._ready.append(event)

    async def _main(self) -> None:
        for event in self._ready:
            await event.wait()
        self.started.set()
        log.info("scheduler started")
        await self.scheduler.run()

    async def start(self) -> None:
        for feed in self._feeds:
            self._tasks.append(asyncio.create_task(feed(), name="scheduler-feed"))
        self._tasks.append(asyncio.create_task(self._main(), name="scheduler-loop"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        # Binds, Events and conditions already decided reach the API server before the clients
        # close (bounded: a dead API server must not hold shutdown).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_DRAIN_ON_STOP_S):
                await self.scheduler.drain()
        if self._detach is not None:
            self._detach()
        self.scheduler.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def settle(self, *, timeout_s: float = 30.0) -> None:
        """Wait until nothing is ready to schedule and every bind and write has finished
        (pods left are unschedulable, waiting or backing off)."""
        async with asyncio.timeout(timeout_s):
            await self.started.wait()
            while True:
                await self.scheduler.drain()
                await asyncio.sleep(0)
                if self.scheduler.idle.is_set() and self.scheduler.binder.in_flight == 0:
                    await asyncio.sleep(0.01)
                    if self.scheduler.idle.is_set() and self.scheduler.binder.in_flight == 0:
                        return
                await asyncio.sleep(0.01)
