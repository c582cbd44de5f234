"""Gangs, preemption and recovery attached to a running scheduler, as one async context manager.

On Kubernetes (:meth:`GangRuntime.on_kube`): a watch of scheduler-plugins ``PodGroup`` objects
(``scheduling.x-k8s.io/v1alpha1``) and of ``PodDisruptionBudget`` objects, ``nominatedNodeName``
written through ``pods/status``; in memory (:meth:`GangRuntime.in_memory`) the same steps with no
PodGroups and no budgets. Scheduling waits until the PodGroups are listed, so a member of a
scheduler-plugins gang is never mistaken for a lone pod at start-up.

:class:`GangSettings` come from the config file's ``gangs`` section
(``coordinator.app.config.sections.GangsSection``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from common.kube import POD_GROUPS, PODS, KubeClient, KubeError, NotFound
from coordinator.adapters.kube.objects import PDBS, ObjectCache
from coordinator.core.domains.layout import DomainKeys
from coordinator.engine.gangs.recovery import Recovery
from coordinator.engine.gangs.running import budgets
from coordinator.engine.gangs.step import GangStep
from coordinator.engine.ports import ClusterError, PodRef
from coordinator.engine.preemptor import Nominate, Preemptor
from coordinator.engine.service import SchedulerRuntime

log = logging.getLogger(__name__)

__all__ = ["GangRuntime", "GangSettings", "kube_nominator"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GangSettings:
    default_timeout_s: float = 300.0
    """A gang with no ``gang-timeout`` / ``scheduleTimeoutSeconds`` gives up after this long."""
    backoff_s: float = 10.0
    """After a timeout a gang waits this long before it is tried again."""
    tick_s: float = 0.5
    """How often timeouts and membership are checked."""
    preemption: bool = True
    """Evict lower-priority pods and gangs for a pod or gang that does not fit."""
    recovery: bool = True
    """Move gangs and pods off failed GPUs and nodes."""
    nomination_ttl_s: float = 60.0
    """How long a preemptor waits for its victims before it may preempt again."""
    keys: DomainKeys = field(default_factory=DomainKeys)
    """Node labels naming the network tiers."""


def kube_nominator(client: KubeClient) -> Nominate:
    """``status.nominatedNodeName`` through ``pods/status``."""

    async def nominate(pod: PodRef, node: str) -> None:
        try:
            await client.patch(
                PODS,
                pod.name,
                {"status": {"nominatedNodeName": node}},
                namespace=pod.namespace,
                subresource="status",
            )
        except NotFound:
            return
        except KubeError as exc:
            raise ClusterError(f"nominate {pod.key} for {node}: {exc}") from exc

    return nominate


class GangRuntime:
    """The gang step, preemption and recovery around one :class:`SchedulerRuntime`."""

    def __init__(
        self,
        runtime: SchedulerRuntime,
        *,
        settings: GangSettings | None = None,
        podgroups: ObjectCache | None = None,
        pdbs: ObjectCache | None = None,
        nominate: Nominate | None = None,
        clock: Callable[[], float] = time.monotonic,
        namespace: str | None = None,
    ) -> None:
        self.settings = settings = settings or GangSettings()
        self.runtime = runtime
        scheduler = runtime.scheduler
        self._podgroup_cache = podgroups
        self._pdb_cache = pdbs
        groups: Mapping[tuple[str, str], Mapping[str, Any]] = (
            podgroups.objects if podgroups is not None else {}
        )
        self.preemptor: Preemptor | None = None
        if settings.preemption:
            self.preemptor = Preemptor(
                scheduler,
                podgroups=groups,
                budgets=lambda: budgets(pdbs.objects.values()) if pdbs is not None else [],
                nominate=nominate,
                keys=settings.keys,
                nomination_ttl_s=settings.nomination_ttl_s,
                clock=clock,
            )
        self.step = GangStep(
            scheduler,
            podgroups=groups,
            keys=settings.keys,
            preemption=self.preemptor,
            clock=clock,
            default_timeout_s=settings.default_timeout_s,
            backoff_s=settings.backoff_s,
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
        if podgroups is not None:
            runtime.add_gate(podgroups.synced)

    @classmethod
    def on_kube(
        cls,
        runtime: SchedulerRuntime,
        client: KubeClient,
        *,
        settings: GangSettings | None = None,
        namespace: str | None = None,
    ) -> GangRuntime:
        holder: list[GangRuntime] = []

        def changed(key: tuple[str, str], obj: object) -> None:
            if holder:
                holder[0].step.podgroups_changed(*key)

        podgroups = ObjectCache(client, POD_GROUPS, namespace=namespace, on_change=changed)
        pdbs = ObjectCache(client, PDBS, namespace=namespace)
        out = cls(
            runtime,
            settings=settings,
            podgroups=podgroups,
            pdbs=pdbs,
            nominate=kube_nominator(client),
            namespace=namespace,
        )
        holder.append(out)
        return out

    @classmethod
    def in_memory(
        cls, runtime: SchedulerRuntime, *, settings: GangSettings | None = None
    ) -> GangRuntime:
        return cls(runtime, settings=settings)

    # --- running -------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def _ticker(self) -> None:
        await self.runtime.started.wait()
        self.step.start()
        while True:
            try:
                self.step.tick()
            except Exception:
                log.exception("gang tick failed")
            await asyncio.sleep(self.settings.tick_s)

    async def start(self) -> None:
        for cache in (self._podgroup_cache, self._pdb_cache):
            if cache is not None:
                self._spawn(cache.run(), f"watch {cache.resource.plural}")
        self._spawn(self._ticker(), "gang-ticker")
        if self.recovery is not None:
            self._spawn(self.recovery.run(), "gang-recovery")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
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
