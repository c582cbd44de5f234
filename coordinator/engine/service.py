"""The runtime assembled: a :class:`~.loop.Scheduler` with the feeds that fill its queue, as
one async context manager. The loop starts once every ``ready`` event (and gate) is set.

The adapters build it: on Kubernetes :func:`coordinator.adapters.kube.runtime.kube_runtime` (the
feed is the pending-pod watch; ready once the inventory has synced, so GPU assignments of bound
pods are known before anything is placed, and the first list of pending pods is in), in memory
:func:`coordinator.adapters.memory.runtime.memory_runtime` (the cluster feeds the queue)::

    async with memory_runtime(inventory, cluster) as runtime:
        cluster.create_pod(manifest)
        await runtime.settle()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from coordinator.engine.leadership import Leadership
from coordinator.engine.loop import Scheduler

log = logging.getLogger(__name__)
_DRAIN_ON_STOP_S = 5.0

__all__ = ["SchedulerRuntime"]


class SchedulerRuntime:
    """``feeds`` run as tasks from ``start`` to ``stop``; ``detach`` runs once stopped."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        feeds: Sequence[Callable[[], Coroutine[Any, Any, None]]] = (),
        ready: Sequence[asyncio.Event] = (),
        detach: Callable[[], None] | None = None,
        jobs: Callable[[], Iterable[Mapping[str, Any]]] = lambda: (),
        controller: Callable[[str, str, str, str], Mapping[str, Any] | bool | None] = (
            lambda *_: None
        ),
    ) -> None:
        self.scheduler = scheduler
        #: ``controller(kind, namespace, name, uid)``: a pod's (or Workload's) controller as the
        #: backend caches it — the object, ``False`` while not cached yet, ``None`` for a kind it
        #: does not watch (the placement check reads the keys its pods will inherit).
        self.controller = controller
        #: The Job objects the backend watches now (defragmentation reads their retries; their
        #: deadlines end running pods in the forecast); none where it watches none.
        self.jobs = jobs
        self._feeds = tuple(feeds)
        self._ready = list(ready)
        self._detach = detach
        self._tasks: list[asyncio.Task[None]] = []
        self.started = asyncio.Event()  # set once the loop runs (after the initial sync)

    def add_gate(self, event: asyncio.Event) -> None:
        """Scheduling also waits for ``event`` (e.g. the PodGroups listed) before it starts."""
        self._ready.append(event)

    def follow(self, leadership: Leadership) -> None:
        """Schedule, bind and run the gangs' writers only while ``leadership`` says this replica
        leads: from when it first does, stopping whenever it stops and resuming when it leads
        again (:mod:`.leadership`)."""
        self.scheduler.leadership = leadership

    async def _main(self) -> None:
        for event in self._ready:
            await event.wait()
        await self.scheduler.wait_until_leading()
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
