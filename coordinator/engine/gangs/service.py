"""Gangs, preemption and recovery attached to a running scheduler, as one async context manager.

On Kubernetes (:func:`coordinator.adapters.kube.runtime.kube_gang_runtime`): fed by watches of
scheduler-plugins ``PodGroup`` objects (``scheduling.x-k8s.io/v1alpha1``), the Workload API's
``PodGroup`` objects (``scheduling.k8s.io/v1alpha2``, where served) and ``PodDisruptionBudget``
objects, ``nominatedNodeName`` written through ``pods/status``, PodGroup status written; in memory
(``GangRuntime(runtime)``) the same steps with no PodGroups and no budgets. Scheduling waits until
the PodGroups are listed, so a member of a scheduler-plugins gang is never mistaken for a lone pod
at start-up.

:class:`GangSettings` come from the config file's ``gangs`` section
(``coordinator.app.config.sections.GangsSection``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from common.waiting import wait_set
from coordinator.core.domains.layout import DomainKeys
from coordinator.core.gangs.cycle import GangPlanner, schedule_gang
from coordinator.core.preemption.defrag import DefragPlanner, DefragSettings, plan_defrag
from coordinator.core.preemption.protections import Protections
from coordinator.core.preemption.victims import DisruptionBudget
from coordinator.engine.gangs.recovery import Recovery
from coordinator.engine.gangs.step import GangStep
from coordinator.engine.preemptor import Nominate, Preemptor
from coordinator.engine.service import SchedulerRuntime

log = logging.getLogger(__name__)

__all__ = ["GangRuntime", "GangSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GangSettings:
    default_timeout_s: float = 300.0
    """A gang with no ``gang-timeout`` / ``scheduleTimeoutSeconds`` gives up after this long."""
    backoff_s: float = 10.0
    """After a timeout a gang waits this long before it is tried again."""
    tick_s: float = 0.5
    """How often timeouts and membership are checked while anything is due: at most every
    ``tick_s``, and only when a pod, node or PodGroup changed or a deadline (a timeout, the end of
    a backoff or preemption delay, a compaction) came."""
    idle_tick_s: float = 30.0
    """With nothing due, the check still runs this often (what no event announced — a bind held
    by the scheduler that expired — is seen within this)."""
    arrival_quiet_s: float = 2.0
    """A member of a gang still short of members is told why it waits once no new member has
    joined for this long…"""
    arrival_within_s: float = 30.0
    """…or this long after the gang's timeout began, whichever comes first (docs/gangs.md)."""
    preemption: bool = True
    """Evict lower-priority pods and gangs for a pod or gang that does not fit."""
    recovery: bool = True
    """Move gangs and pods off failed GPUs and nodes."""
    nomination_ttl_s: float = 60.0
    """How long a preemptor waits for its victims before it may preempt again."""
    keys: DomainKeys = field(default_factory=DomainKeys)
    """Node labels naming the network tiers."""
    protections: Protections = field(default_factory=Protections)
    """Minimum runtime, preemption delay and eviction budget of preemption."""
    defrag: DefragSettings = field(default_factory=DefragSettings)
    """Moving movable pods so that a waiting workload fits (docs/defragmentation.md)."""


class GangRuntime:
    """The gang step, preemption and recovery around one :class:`SchedulerRuntime`.

    ``podgroups``: the PodGroup objects by ``(namespace, name)``, kept current by one of the
    ``feeds`` (which run from ``start`` to ``stop``); ``budgets``: the disruption budgets now;
    ``nominate``: records a preemptor's nominated node."""

    def __init__(
        self,
        runtime: SchedulerRuntime,
        *,
        settings: GangSettings | None = None,
        podgroups: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
        budgets: Callable[[], Sequence[DisruptionBudget]] = lambda: (),
        nominate: Nominate | None = None,
        feeds: Sequence[Callable[[], Coroutine[Any, Any, None]]] = (),
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        namespace: str | None = None,
        planner: GangPlanner = schedule_gang,
        mover: DefragPlanner = plan_defrag,
    ) -> None:
        """``clock`` times gang timeouts, backoff, nominations, recovery and preemption delays;
        ``wall_clock`` stamps records and is what pods' runtimes are measured to (minimum
        runtime). ``planner`` decides a gang's members (the engine's whole-gang planning;
        ``coordinator.sim`` passes a baseline's); ``mover`` plans defragmentation's moves
        (likewise)."""
        self.settings = settings = settings or GangSettings()
        self.runtime = runtime
        scheduler = runtime.scheduler
        self._feeds = tuple(feeds)
        groups = podgroups if podgroups is not None else {}
        self.preemptor: Preemptor | None = None
        if settings.preemption:
            self.preemptor = Preemptor(
                scheduler,
                podgroups=groups,
                budgets=budgets,
                nominate=nominate,
                keys=settings.keys,
                nomination_ttl_s=settings.nomination_ttl_s,
                clock=clock,
                wall_clock=wall_clock,
                protections=settings.protections,
                defrag=settings.defrag,
                jobs=runtime.jobs,
                mover=mover,
            )
        self.step = GangStep(
            scheduler,
            podgroups=groups,
            keys=settings.keys,
            preemption=self.preemptor,
            clock=clock,
            wall_clock=wall_clock,
            planner=planner,
            default_timeout_s=settings.default_timeout_s,
            backoff_s=settings.backoff_s,
            arrival_quiet_s=settings.arrival_quiet_s,
            arrival_within_s=settings.arrival_within_s,
            namespace=namespace,
        )
        self.step.attach()
        if self.preemptor is not None:
            scheduler.post_filter.append(self.preemptor.post_filter)
        self.recovery = (
            Recovery(self.step, keys=settings.keys, clock=clock, namespace=namespace)
            if settings.recovery
            else None
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._clock = clock
        # What may give the ticker work: pods pending or gone, inventory events, binds, PodGroups,
        # a pod tried (the gang step), preemption tried for a pod, a recovery begun.
        self._poked = asyncio.Event()
        poke = self._poked.set
        self.step.changed = poke
        if self.preemptor is not None:
            self.preemptor.changed = poke
        scheduler.queue.listeners.append(lambda pod, present: poke())
        scheduler.bind_listeners.append(lambda job, exc: poke())
        self._unsubscribe = scheduler.inventory.subscribe(lambda event: poke())

    # --- running -------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def _ticker(self) -> None:
        await self.runtime.started.wait()
        self.step.start()
        leadership = self.runtime.scheduler.leadership
        while True:
            await leadership.wait_until_leading()  # timeouts evict: the leader's alone
            self._poked.clear()
            try:
                self.step.tick()
                if self.preemptor is not None:
                    self.preemptor.tick()
            except Exception:
                log.exception("gang tick failed")
            await asyncio.sleep(self.settings.tick_s)
            if not self._poked.is_set():
                # Nothing seen since this tick: sleep until the next deadline (a simulation
                # of days jumps from event to event instead of ticking every half second).
                await wait_set(self._poked, self._idle_s())

    def _idle_s(self) -> float:
        """Seconds until the step or preemption next has timed work (0: now)."""
        dues = [self.step.next_tick()]
        if self.preemptor is not None:
            dues.append(self.preemptor.next_tick())
        due = min((d for d in dues if d is not None), default=None)
        idle = self.settings.idle_tick_s
        return idle if due is None else max(0.0, min(idle, due - self._clock()))

    async def _recovery(self, recovery: Recovery) -> None:
        # Only once the inventory is listed (and this replica leads): before that a node whose
        # pods are listed ahead of its Node object would look deleted.
        await self.runtime.started.wait()
        await recovery.run()

    async def start(self) -> None:
        for feed in self._feeds:
            self._spawn(feed(), "gang-feed")
        self._spawn(self._ticker(), "gang-ticker")
        if self.recovery is not None:
            self._spawn(self._recovery(self.recovery), "gang-recovery")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self.step.membership.close()
        self._unsubscribe()
        if self.recovery is not None:
            self.recovery.close()

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
