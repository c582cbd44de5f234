"""Memory as the coordinator's :class:`~coordinator.app.backend.Backend` (``--in-memory``, the
demo): the cluster is a :class:`~coordinator.adapters.memory.cluster.MemoryCluster` over the app's
inventory, which writes binds into itself and feeds the scheduler's queue. Nothing needs an API
server: authentication and leader election cannot be on, and there are no AgentPools."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from aiohttp import web

from coordinator.adapters.kube.lease import LeaseRecord, LeaseStore, LeaseUnavailable
from coordinator.api.keys import READINESS
from coordinator.app.auth.settings import AuthSettings
from coordinator.app.backend import Authentication, PodWriter
from coordinator.app.config.load import ConfigError
from coordinator.app.config.sections import Config
from coordinator.app.election import LeaderElectionSettings
from coordinator.core.framework.profiles import Profiles
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.loop import RuntimeSettings
from coordinator.engine.service import SchedulerRuntime
from coordinator.engine.whatif.service import WhatIf
from coordinator.inventory.store import Inventory

if TYPE_CHECKING:  # imported where ``--in-memory`` runs: the API-server path never loads it
    from coordinator.adapters.memory.cluster import MemoryCluster

__all__ = ["MemoryBackend"]

C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class MemoryBackend:
    """No API server: Node and Pod objects live in ``cluster``, over the app's inventory (which
    is ``cluster.inventory``)."""

    cluster: MemoryCluster
    where = "in-memory"

    def inventory(self, config: Config, given: Inventory | None) -> Inventory:
        if given is not None and given is not self.cluster.inventory:
            raise ValueError("an in-memory backend serves its own cluster's inventory")
        return self.cluster.inventory

    def install(self, app: web.Application, config: Config) -> None:
        source = config.gangs.tree.source
        if source != "labels":  # HyperNodes and Topologies live in an API server only
            raise ConfigError(
                f"config: gangs.tree.source: {source!r} reads objects from the API server, and "
                "the in-memory backend has none: give the tree as node labels "
                "(gangs.domainKeys or gangs.topologyLevels)"
            )
        app[READINESS].set("inventory", True)  # the cluster is the inventory's own

    def runtime(
        self,
        app: web.Application,
        profiles: Profiles,
        settings: RuntimeSettings,
        *,
        namespace: str | None,
        instance: str,
    ) -> SchedulerRuntime:
        from coordinator.adapters.memory.runtime import memory_runtime

        return memory_runtime(
            self.cluster.inventory, self.cluster, framework=profiles, settings=settings
        )

    def gangs(
        self,
        runtime: SchedulerRuntime,
        settings: GangSettings,
        *,
        namespace: str | None,
    ) -> GangRuntime:
        return GangRuntime(runtime, settings=settings)

    def authentication(self, auth: AuthSettings | None) -> Authentication:
        if auth is not None and auth.enabled:
            raise ValueError(
                "auth.enabled needs an API server (TokenReview); it cannot be on with --in-memory"
            )
        return Authentication(auth or AuthSettings(enabled=False))

    def leader_election(self, config: Config) -> LeaderElectionSettings | None:
        if config.leader_election is not None and config.leader_election.enabled:
            raise ValueError(
                "leaderElection.enabled needs an API server (a Lease); "
                "it cannot be on with --in-memory"
            )
        return None  # the in-memory cluster is this process's own: it leads

    def lease_store(self, settings: LeaderElectionSettings) -> LeaseStore:
        return _NoLease()

    def own_pod(self) -> PodWriter | None:
        return None

    def agentpools(self, controller: Callable[..., C]) -> C | None:
        return None  # no API server: no AgentPools

    def placement_check(
        self,
        runtime: SchedulerRuntime,
        whatif: Callable[[], WhatIf | None],
        *,
        namespace: str | None,
        synced: asyncio.Event | None = None,
    ) -> None:
        return None  # no API server: no Kueue

    def health_taints(self, runtime: SchedulerRuntime, *, effect: str) -> None:
        return None  # no API server: no DeviceTaintRules to write


class _NoLease:
    async def get(self) -> LeaseRecord | None:
        raise LeaseUnavailable("no API server: no Lease")

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        raise LeaseUnavailable("no API server: no Lease")

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        raise LeaseUnavailable("no API server: no Lease")
