"""The coordinator as ``topos demo`` runs it: the same aiohttp application ``topos coordinator``
serves (agent stream, inventory, explain, simulate, gangs, domains routes), on loopback, with the
scheduler runtime and the gang step over a :class:`~coordinator.engine.MemoryCluster` instead of
an API server. Authentication is off (the demo binds to 127.0.0.1 only).

    async with EmbeddedCoordinator() as coord:
        coord.cluster.add_node(...)        # Node objects (agents stream the hardware)
        coord.cluster.create_pod(manifest)
        await coord.runtime.settle()
        print(coord.url)
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import Self

from aiohttp import web

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.api.explain import SCHEDULER
from coordinator.api.gangs import GANGS
from coordinator.app.main import CoordinatorSettings, create_app, running
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.inventory.store import Inventory

__all__ = ["EmbeddedCoordinator"]


class EmbeddedCoordinator:
    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, stale_ttl_s: float = 600) -> None:
        self.host = host
        self.port = port
        self.inventory = Inventory(stale_ttl_s=stale_ttl_s)
        self.cluster = MemoryCluster(self.inventory)
        # The app's own in-memory runtime would build a private cluster: it is switched off and
        # this one (same classes, same loop) is installed in its slots instead.
        settings = CoordinatorSettings(
            host=host,
            port=port,
            stale_ttl_s=stale_ttl_s,
            in_memory=True,
            extra={"scheduler": {"enabled": False}},
        )
        self.app: web.Application = create_app(settings, inventory=self.inventory)
        self.runtime = memory_runtime(self.inventory, self.cluster)
        self.gangs = GangRuntime(self.runtime, settings=GangSettings())
        self.url = ""
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Self:
        await self._stack.__aenter__()
        try:
            self.url = await self._stack.enter_async_context(
                running(self.app, self.host, self.port)
            )
            self.app[SCHEDULER].scheduler = self.runtime.scheduler
            self.app[GANGS].step = self.gangs.step
            await self.gangs.start()
            self._stack.push_async_callback(self.gangs.stop)
            await self.runtime.start()
            self._stack.push_async_callback(self.runtime.stop)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.app[SCHEDULER].scheduler = None
        self.app[GANGS].step = None
        await self._stack.__aexit__(exc_type, exc, tb)

    async def settle(self, *, timeout_s: float = 30.0) -> None:
        """Wait until nothing is left to try right now and every bind has landed."""
        await self.runtime.settle(timeout_s=timeout_s)
