"""The coordinator as ``topos demo`` runs it: the application ``topos coordinator`` serves, wired
by the same :func:`~coordinator.app.main.wire` (agent stream, inventory, explain, simulate, gangs,
domains routes, the scheduler runtime and the gang step), on loopback, over an in-memory cluster
instead of an API server. Authentication is off (no API server; the demo binds to 127.0.0.1).

    async with EmbeddedCoordinator() as coord:
        coord.cluster.add_node(...)        # Node objects (agents stream the hardware)
        coord.cluster.create_pod(manifest)
        await coord.settle()
        print(coord.url)
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import Self

from aiohttp import web

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.app.config.sections import Config, CoordinatorSection
from coordinator.app.main import running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.app.scheduler import RUNNING
from coordinator.engine.gangs.service import GangRuntime
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory

__all__ = ["EmbeddedCoordinator"]


class EmbeddedCoordinator:
    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, stale_ttl_s: float = 600) -> None:
        self.host = host
        self.port = port
        config = Config(coordinator=CoordinatorSection(stale_ttl_s=stale_ttl_s))
        self.inventory = Inventory(stale_ttl_s=stale_ttl_s)
        self.cluster = MemoryCluster(self.inventory)
        self.app: web.Application = wire(config, MemoryBackend(self.cluster))
        self.url = ""
        self._stack = contextlib.AsyncExitStack()

    @property
    def runtime(self) -> SchedulerRuntime:
        """The scheduler runtime (while running)."""
        runtime = self.app[RUNNING].runtime
        if runtime is None:
            raise RuntimeError("the embedded coordinator is not running")
        return runtime

    @property
    def gangs(self) -> GangRuntime:
        """The gang step, preemption and recovery (while running)."""
        gangs = self.app[RUNNING].gangs
        if gangs is None:
            raise RuntimeError("the embedded coordinator is not running")
        return gangs

    async def __aenter__(self) -> Self:
        self.url = await self._stack.enter_async_context(running(self.app, self.host, self.port))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.__aexit__(exc_type, exc, tb)

    async def settle(self, *, timeout_s: float = 30.0) -> None:
        """Wait until nothing is left to try right now and every bind has landed."""
        await self.runtime.settle(timeout_s=timeout_s)
