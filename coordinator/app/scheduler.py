"""Runs the scheduler inside the coordinator's aiohttp application (a ``cleanup_ctx``).

It reads the config tree's ``scheduler`` (the loop: on or off, which namespace and nodes, binds
in flight), ``kube`` (the API-server clients' rate limit), ``gangs`` and ``scheduling`` (weights
and plugins) sections; ``docs/deploy.md`` lists their keys. The backend builds the runtime and
the gangs (:meth:`~coordinator.app.backend.Backend.runtime`): on Kubernetes, binds and Events go
through two rate-limit budgets of the process's one connection, so explaining never takes a
bind's turn (:mod:`coordinator.adapters.kube.connection`).

On Kubernetes the loop starts after the inventory's first sync (GPU assignments of bound pods are
known before anything is placed) and, with leader election on, only while this replica leads.
In memory the runtime runs over the backend's :class:`~coordinator.adapters.memory.cluster.
MemoryCluster`, so explain and simulate work on what the agents report. While the app runs,
``app[RUNNING]`` holds the runtime and the gangs (the demo waits on them).
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Final

from aiohttp import web

from coordinator.api.explain import SCHEDULER, SchedulerSlot
from coordinator.api.gangs import GANGS, GangSlot  # gangs_runtime (issue 6)
from coordinator.api.keys import METRICS, READINESS
from coordinator.api.whatif import WHATIF, WhatIfSlot
from coordinator.app import forecast_worker
from coordinator.app.backend import Backend
from coordinator.app.config.load import ConfigError
from coordinator.app.config.sections import Config
from coordinator.app.leadership import LEADER
from coordinator.core.framework.prices import PriceTable
from coordinator.core.plugins.domainscore import DomainHistory
from coordinator.core.plugins.pools import CarbonReadings
from coordinator.core.registry import build_profiles
from coordinator.engine.binder import BindJob
from coordinator.engine.forecasts import Forecasts, StartPredictor
from coordinator.engine.gangs.service import GangRuntime
from coordinator.engine.loop import RuntimeSettings
from coordinator.engine.ports import BindConflict, ClusterError
from coordinator.engine.service import SchedulerRuntime
from coordinator.engine.whatif.service import WhatIf
from coordinator.forecast.engine import EngineSettings
from coordinator.forecast.live import LiveForecaster
from coordinator.neuronetes.decide.preview import AGENT_POOL, pool_pods

log = logging.getLogger(__name__)

__all__ = ["RUNNING", "Running", "install_scheduler", "what_if"]


@dataclass(slots=True)
class Running:
    """The scheduler runtime and its gangs while the app runs (``None`` before and after)."""

    runtime: SchedulerRuntime | None = None
    gangs: GangRuntime | None = None
    #: Bind failures and gang recoveries per node (HistoricalPerformance reads it).
    history: DomainHistory | None = None
    #: Regions' carbon intensity (PoolPlacement reads it; the AgentPool controller updates it).
    #: One object for the app's life, so a reloaded framework reads the same readings.
    carbon: CarbonReadings = field(default_factory=CarbonReadings)
    #: Predicted starts of the pending pods (coordinator.forecast.live), refreshed off the loop.
    forecaster: LiveForecaster | None = None
    #: The price table in force (``scheduling.prices``, live reloads included): the AgentPool
    #: controller's cost policy reads it.
    prices: PriceTable = field(default_factory=PriceTable)


RUNNING: Final = web.AppKey("topos.running", Running)


def _context(config: Config, backend: Backend) -> Callable[[web.Application], AsyncIterator[None]]:
    section = config.scheduler
    history = DomainHistory(half_life_s=config.scheduling.process.history_half_life_s)
    carbon = CarbonReadings()
    leaf = config.gangs.keys.leaf  # the gangs' leaf is the plugins' too (topologyLevels or not)
    try:  # one framework per profile, each under its own schedulerName
        profiles = build_profiles(
            config.scheduling,
            history=history,
            carbon=carbon,
            leaf_label=leaf,
        )
    except KeyError as exc:  # enabled_plugins names a plugin nothing registered
        raise ConfigError(f"'scheduling': {exc.args[0]}") from None
    settings = RuntimeSettings(max_binds_in_flight=section.max_binds_in_flight)
    gang_settings = replace(  # gangs_runtime (issue 6)
        config.gangs.settings(), defrag=config.defragmentation.settings()
    )

    # Profiles of their own for each forward run (built in the forecaster's process: nothing
    # shared with the live scheduler's), from the same configuration.
    forward_profiles = functools.partial(build_profiles, config.scheduling, leaf_label=leaf)

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        slot = app[SCHEDULER]
        elector = app.get(LEADER)
        runtime = backend.runtime(
            app,
            profiles,
            settings,
            namespace=section.namespace,
            # Events name the replica that wrote them (its leader-election identity).
            instance=elector.identity if elector is not None else "topos",
        )
        runtime.scheduler.view.node_filter = section.node_filter()
        if elector is not None:
            # Only the leader schedules and writes: from when it leads, while it leads.
            runtime.follow(elector)
        # gangs_runtime (issue 6): the gang step, preemption and recovery on this scheduler.
        gangs = backend.gangs(runtime, gang_settings, namespace=section.namespace)
        app[GANGS].step = gangs.step
        _record_trouble(runtime, gangs, history)
        await gangs.start()
        slot.scheduler = runtime.scheduler
        # The forward runs in a process of their own: a thread would take the interpreter lock
        # from the scheduling loop for as long as a run lasts.
        forecasting = forecast_worker.start()
        forecasts = Forecasts()
        runtime.scheduler.forecasts = forecasts
        forecaster = LiveForecaster(
            runtime.scheduler,
            forecasts,
            profiles=forward_profiles,
            settings=EngineSettings(gangs=gang_settings, runtime=settings),
            restate=runtime.scheduler.restate,
            executor=forecasting,
            new_executor=forecast_worker.start,
            jobs=runtime.jobs,
        )
        app[WHATIF].whatif = what_if(runtime, gangs, predictor=forecaster)
        app[METRICS].scheduling.attach(runtime.scheduler)
        # Kueue's placement admission check (docs/kueue.md): the same what-if answers it; the
        # room its Ready checks hold is held again before the scheduler starts (a restart).
        checks = backend.placement_check(
            runtime,
            lambda: app[WHATIF].whatif,
            namespace=section.namespace,
            synced=app[READINESS].reached("inventory"),
        )
        if checks is not None:
            runtime.add_gate(checks.ready)
            await checks.start()
        await runtime.start()
        forecaster.start(runtime.started)
        app[RUNNING].forecaster = forecaster
        app[RUNNING].runtime, app[RUNNING].gangs = runtime, gangs
        app[RUNNING].history = history
        app[RUNNING].carbon = carbon
        app[RUNNING].prices = config.scheduling.process.prices
        try:
            yield
        finally:
            await forecaster.stop()
            if isinstance(forecaster.executor, concurrent.futures.ProcessPoolExecutor):
                forecast_worker.stop_now(forecaster.executor)
            app[RUNNING].forecaster = None
            if checks is not None:
                await checks.stop()
            app[RUNNING].runtime = app[RUNNING].gangs = app[RUNNING].history = None
            slot.scheduler = None
            app[WHATIF].whatif = None
            app[METRICS].scheduling.detach()
            app[GANGS].step = None
            await gangs.stop()
            await runtime.stop()

    return ctx


def what_if(
    runtime: SchedulerRuntime, gangs: GangRuntime, *, predictor: StartPredictor | None = None
) -> WhatIf:
    """The what-if on this scheduler: its PodGroups, its preemption's choice of victims, its
    network tiers; AgentPools expanded as the NeuroNetes controller would; predicted starts
    from ``predictor``."""
    api_version, kind = AGENT_POOL
    return WhatIf(
        runtime.scheduler,
        podgroups=gangs.step.podgroups,
        preemptor=gangs.preemptor,
        keys=gangs.settings.keys,
        extra={kind: (api_version, pool_pods)},
        predictor=predictor,
    )


def _record_trouble(runtime: SchedulerRuntime, gangs: GangRuntime, history: DomainHistory) -> None:
    """Feed HistoricalPerformance: a failed bind counts against its node, a gang recovery
    against the nodes whose failure caused it."""

    def bound(job: BindJob, error: ClusterError | None) -> None:
        if error is not None and not isinstance(error, BindConflict):
            history.record((job.decision.node,))

    runtime.scheduler.bind_listeners.append(bound)
    if gangs.recovery is not None:
        gangs.recovery.listeners.append(history.record)


def install_scheduler(app: web.Application, config: Config, backend: Backend) -> None:
    """Give ``app`` the slots the explain/simulate and gang routes read, and — unless the
    ``scheduler`` section disables it — the runtime as a ``cleanup_ctx``."""
    app[SCHEDULER] = SchedulerSlot()
    app[GANGS] = GangSlot(keys=config.gangs.keys)  # gangs_runtime (issue 6)
    app[RUNNING] = Running()
    app[WHATIF] = WhatIfSlot()
    if config.scheduler.enabled:
        app.cleanup_ctx.append(_context(config, backend))
