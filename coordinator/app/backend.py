"""Where the cluster lives: the API server (``topos coordinator``) or memory (``--in-memory``,
``topos demo``). The wiring (:func:`coordinator.app.main.wire`) takes a :class:`Backend` and asks
it for everything that differs between the two; it never asks which one it has.

- :class:`~coordinator.app.kube_backend.KubeBackend`: Nodes and Pods mirrored into the inventory,
  binds and Events written there, TokenReview for authentication, a Lease for leader election —
  all through one connection (:class:`~coordinator.adapters.kube.connection.KubeConnection`)
  opened when the app starts.
- :class:`~coordinator.app.memory_backend.MemoryBackend`: Node and Pod objects live in a
  :class:`~coordinator.adapters.memory.cluster.MemoryCluster` over the app's inventory;
  authentication and leader election are off, no AgentPools.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from aiohttp import web

    from coordinator.adapters.kube.lease import LeaseStore
    from coordinator.adapters.kube.tokenreview import TokenReviewer
    from coordinator.app.auth.agents import PodNodeResolver
    from coordinator.app.auth.settings import AuthSettings
    from coordinator.app.config.sections import Config
    from coordinator.app.election import LeaderElectionSettings
    from coordinator.core.framework.profiles import Profiles
    from coordinator.engine.gangs.service import GangRuntime, GangSettings
    from coordinator.engine.loop import RuntimeSettings
    from coordinator.engine.service import SchedulerRuntime
    from coordinator.engine.whatif.service import WhatIf
    from coordinator.inventory.store import Inventory

__all__ = ["Authentication", "Backend", "PodWriter"]

C = TypeVar("C")


class Startable(Protocol):
    """A background part of the app, started before the scheduler (which waits for ``ready``)
    and stopped after it."""

    ready: asyncio.Event

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Runnable(Protocol):
    """A background loop of the app (run as a task while the scheduler runs)."""

    async def run(self) -> None: ...


class PodWriter(Protocol):
    """The coordinator's own Pod (see :mod:`coordinator.adapters.kube.ownpod`)."""

    async def label(self, key: str, value: str | None) -> None: ...

    async def warn(self, reason: str, message: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Authentication:
    """How the app authenticates requests."""

    settings: AuthSettings
    reviewer: TokenReviewer | None = None
    """Reviews bearer tokens (``None``: authentication is off)."""
    resolver: PodNodeResolver | None = None
    """Finds the node of an agent's pod."""


class Backend(Protocol):
    where: str
    """For the log: ``API server`` or ``in-memory``."""

    def inventory(self, config: Config, given: Inventory | None) -> Inventory:
        """The inventory the app serves (``given``: the caller's, where the backend allows)."""
        ...

    def install(self, app: web.Application, config: Config) -> None:
        """Connect when ``app`` starts (before any other background task) and keep its
        inventory in step with the cluster; readiness ``inventory`` is set once it is."""
        ...

    def runtime(
        self,
        app: web.Application,
        profiles: Profiles,
        settings: RuntimeSettings,
        *,
        namespace: str | None,
        instance: str,
    ) -> SchedulerRuntime:
        """The scheduler runtime, binding into this cluster (called while ``app`` starts)."""
        ...

    def gangs(
        self,
        runtime: SchedulerRuntime,
        settings: GangSettings,
        *,
        namespace: str | None,
    ) -> GangRuntime:
        """The gang runtime on ``runtime`` (PodGroups, budgets and their status, where they
        exist)."""
        ...

    def placement_check(
        self,
        runtime: SchedulerRuntime,
        whatif: Callable[[], WhatIf | None],
        *,
        namespace: str | None,
        synced: asyncio.Event | None = None,
    ) -> Startable | None:
        """Kueue's placement admission check answered on ``runtime`` (``None``: no API server,
        no Kueue); started after the scheduler, stopped before it."""
        ...

    def health_taints(self, runtime: SchedulerRuntime, *, effect: str) -> Runnable | None:
        """The writer of DeviceTaintRules for the unhealthy GPUs ``runtime``'s inventory holds
        (``None``: no API server to write them to); it writes only while ``runtime`` runs and
        leads."""
        ...

    def authentication(self, auth: AuthSettings | None) -> Authentication:
        """How requests are authenticated; raises ValueError for what this backend cannot do."""
        ...

    def leader_election(self, config: Config) -> LeaderElectionSettings | None:
        """The election to run (``None``: none, this process leads); raises ValueError for an
        election this backend cannot hold."""
        ...

    def lease_store(self, settings: LeaderElectionSettings) -> LeaseStore:
        """The Lease the election is held on."""
        ...

    def own_pod(self) -> PodWriter | None:
        """The coordinator's own Pod, to label and post Events on (``None``: it has none)."""
        ...

    def agentpools(self, controller: Callable[..., C]) -> C | None:
        """``controller(client, writes=...)`` over this cluster's AgentPools: ``client`` to watch
        them, ``writes`` (the adapter's ``AgentPoolWriter``) to write (``None``: there are
        none); called while the app starts."""
        ...
