"""The production engine over an in-memory cluster, on the running loop's clock.

Run inside a :class:`~coordinator.forecast.clock.SimulatedLoop` (the replay, the tests, a
prediction), every timer of the engine — queue backoff, gang timeouts and their backoff, the gang
tick, nominations, recovery, assumption expiry — runs on simulated time::

    async def main() -> None:
        async with SimulatedEngine() as engine:
            engine.cluster.add_node("gpu-1", topology=...)
            engine.cluster.create_pod(manifest)
            await asyncio.sleep(600)     # ten simulated minutes, no wall time waited

    SimulatedLoop().run_until_complete(main())

It is the same assembly ``topos coordinator --in-memory`` runs
(:func:`~coordinator.adapters.memory.runtime.memory_runtime` and
:class:`~coordinator.engine.gangs.service.GangRuntime`), with ``loop.time`` as every clock and
agents that never go stale (nothing heartbeats in a simulation).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Self

from coordinator.core.framework.profile import Framework
from coordinator.core.framework.profiles import Profiles
from coordinator.core.gangs.cycle import GangPlanner, schedule_gang
from coordinator.core.preemption.defrag import DefragPlanner, plan_defrag
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.loop import RuntimeSettings, Scheduler
from coordinator.engine.service import SchedulerRuntime
from coordinator.forecast.clock import EPOCH
from coordinator.inventory.store import Inventory

if TYPE_CHECKING:
    from coordinator.adapters.memory.cluster import MemoryCluster

__all__ = ["EngineSettings", "SimulatedEngine"]

_FOREVER = 1e15  # agents never go stale: they would heartbeat


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSettings:
    gangs: GangSettings = field(default_factory=GangSettings)
    """Gang timeout, backoff and tick; preemption and recovery on or off."""
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    """The queue's backoff, the binder."""


class SimulatedEngine:
    """Create inside the running loop; nodes and pods go into :attr:`cluster`."""

    def __init__(
        self,
        *,
        framework: Framework | Profiles | None = None,
        planner: GangPlanner = schedule_gang,
        settings: EngineSettings | None = None,
        mover: DefragPlanner = plan_defrag,
    ) -> None:
        loop = asyncio.get_running_loop()
        settings = settings or EngineSettings()
        clock = loop.time

        def wall() -> float:
            return EPOCH + loop.time()

        self.inventory = Inventory(stale_ttl_s=_FOREVER, unknown_node_ttl_s=_FOREVER, clock=clock)
        # Imported here: a coordinator on an API server wires the forecaster (this module) but
        # loads the in-memory cluster only in its forecasting process, when it first runs.
        from coordinator.adapters.memory.cluster import MemoryCluster
        from coordinator.adapters.memory.runtime import memory_runtime

        self.cluster: MemoryCluster = MemoryCluster(self.inventory, clock=wall)
        self.runtime: SchedulerRuntime = memory_runtime(
            self.inventory,
            self.cluster,
            framework=framework,
            settings=settings.runtime,
            clock=clock,
            wall_clock=wall,
        )
        self.gangs = GangRuntime(
            self.runtime,
            settings=settings.gangs,
            clock=clock,
            wall_clock=wall,
            planner=planner,
            mover=mover,
        )
        self._stack = contextlib.AsyncExitStack()

    @property
    def scheduler(self) -> Scheduler:
        return self.runtime.scheduler

    async def __aenter__(self) -> Self:
        await self._stack.enter_async_context(self.runtime)
        await self._stack.enter_async_context(self.gangs)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.__aexit__(exc_type, exc, tb)
