"""The API server as the coordinator's :class:`~coordinator.app.backend.Backend`: one connection
(:class:`~coordinator.adapters.kube.connection.KubeConnection`) opened when the app starts, before
every other background task, and closed after them; each part of the app gets the budget of that
connection meant for it (the connection's module says which)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from aiohttp import web

from coordinator.adapters.kube.admissioncheck import PlacementCheckController
from coordinator.adapters.kube.agentpools import AgentPoolWriter
from coordinator.adapters.kube.connection import KubeConnection, NotConnected
from coordinator.adapters.kube.healthtaints import HealthTaintWriter
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.adapters.kube.lease import (
    KubeLeaseStore,
    LeaseRecord,
    LeaseStore,
    LeaseUnavailable,
)
from coordinator.adapters.kube.ownpod import OwnPod
from coordinator.adapters.kube.podnode import KubePodNodeResolver
from coordinator.adapters.kube.runtime import kube_gang_runtime, kube_runtime
from coordinator.adapters.kube.tokenreview import (
    CachingReviewer,
    KubeTokenReviewer,
    Review,
    ReviewUnavailable,
)
from coordinator.adapters.kube.tree import tree_watch
from coordinator.api.keys import INVENTORY, METRICS, READINESS
from coordinator.app.auth.settings import AuthSettings
from coordinator.app.backend import Authentication
from coordinator.app.collector import settle
from coordinator.app.config.sections import Config, TreeSection
from coordinator.app.election import LeaderElectionSettings
from coordinator.app.watchmetrics import WatchEvents
from coordinator.core.framework.profiles import Profiles
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.loop import RuntimeSettings
from coordinator.engine.service import SchedulerRuntime
from coordinator.engine.whatif.service import WhatIf
from coordinator.inventory.store import Inventory

__all__ = ["KubeBackend"]

C = TypeVar("C")


class KubeBackend:
    """The API server of ``kubeconfig`` (default: in-cluster, then ``$KUBECONFIG``)."""

    where = "API server"

    def __init__(self, kubeconfig: str | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.connection = KubeConnection(kubeconfig)
        self._tree = TreeSection()

    def inventory(self, config: Config, given: Inventory | None) -> Inventory:
        if given is not None:
            return given
        return Inventory(
            stale_ttl_s=config.coordinator.stale_ttl_s,
            unknown_node_ttl_s=config.coordinator.unknown_node_ttl_s,
            agent_grace_s=config.scheduler.agent_grace_s,
        )

    def install(self, app: web.Application, config: Config) -> None:
        self.connection.rate_limit = config.kube.rate_limit
        self._tree = config.gangs.tree
        app.cleanup_ctx.append(self._connected)

    async def _connected(self, app: web.Application) -> AsyncIterator[None]:
        readiness = app[READINESS]
        readiness.set("inventory", False)
        await self.connection.open()

        # The first lists allocate millions of short-lived, acyclic objects (5,000 Nodes are
        # some 60 MB of JSON): the cyclic collector has nothing to find in them but would walk
        # them hundreds of times (a quarter of the list's CPU). It is paused until the first
        # sync, 60 s at most.
        paused = gc.isenabled()
        gc.disable()
        resume = asyncio.get_running_loop().call_later(60.0, gc.enable) if paused else None

        def synced() -> None:
            readiness.set("inventory", True)
            # What the first list built lives as long as the process: out of the collector's
            # full passes (~0.4 s each at 5,000 Nodes), and higher thresholds from now on.
            settle()
            if resume is not None:
                resume.cancel()
                gc.enable()

        sync = KubeSync(self.connection.budgets.control, app[INVENTORY], on_synced=synced)
        app[METRICS].registry.register(WatchEvents(sync))
        tasks = [asyncio.create_task(sync.run(), name="kube-sync")]
        tree = tree_watch(
            self.connection.budgets.control,
            app[INVENTORY],
            source=self._tree.source,
            topology=self._tree.topology,
            events_client=self.connection.budgets.events,
            own_pod=_own_pod(),
        )
        if tree is not None:  # gangs.tree.source: the domain tree from objects watched live
            tasks.append(asyncio.create_task(tree.run(), name="kube-tree"))
        try:
            yield
        finally:
            if resume is not None:
                resume.cancel()
                gc.enable()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.connection.close()

    def runtime(
        self,
        app: web.Application,
        profiles: Profiles,
        settings: RuntimeSettings,
        *,
        namespace: str | None,
        instance: str,
    ) -> SchedulerRuntime:
        budgets = self.connection.budgets
        return kube_runtime(
            budgets.scheduler,
            app[INVENTORY],
            inventory_synced=app[READINESS].reached("inventory"),
            framework=profiles,
            settings=settings,
            namespace=namespace,
            events_client=budgets.events,
            instance=instance,
        )

    def gangs(
        self,
        runtime: SchedulerRuntime,
        settings: GangSettings,
        *,
        namespace: str | None,
    ) -> GangRuntime:
        return kube_gang_runtime(
            runtime,
            self.connection.budgets.scheduler,
            settings=settings,
            namespace=namespace,
        )

    def placement_check(
        self,
        runtime: SchedulerRuntime,
        whatif: Callable[[], WhatIf | None],
        *,
        namespace: str | None,
        synced: asyncio.Event | None = None,
    ) -> PlacementCheckController:
        """Kueue's topos.io/placement AdmissionChecks and the Workloads waiting on them (idle,
        saying so once, where Kueue is not installed): docs/kueue.md."""
        return PlacementCheckController(
            self.connection.budgets.scheduler,
            runtime.scheduler,
            whatif,
            namespace=namespace,
            synced=synced,
            controllers=runtime.controller,
        )

    def health_taints(self, runtime: SchedulerRuntime, *, effect: str) -> HealthTaintWriter:
        """DeviceTaintRules for unhealthy GPUs (docs/health.md), written by the leader."""
        scheduler = runtime.scheduler
        return HealthTaintWriter(
            self.connection.budgets.scheduler,
            scheduler.inventory,
            scheduler.view.dra,
            effect=effect,
            active=lambda: runtime.started.is_set() and scheduler.binder.may_bind(),
        )

    def authentication(self, auth: AuthSettings | None) -> Authentication:
        settings = auth or AuthSettings()
        if not settings.enabled:
            return Authentication(settings)
        reviewer = CachingReviewer(
            _Reviewer(self.connection, settings.audiences),
            ttl_s=settings.cache_ttl_s,
            negative_ttl_s=settings.negative_cache_ttl_s,
            max_entries=settings.cache_max_entries,
        )
        return Authentication(settings, reviewer, _Resolver(self.connection))

    def leader_election(self, config: Config) -> LeaderElectionSettings | None:
        if config.leader_election is None and config.scheduler.enabled:
            return LeaderElectionSettings()  # on by default wherever this process binds
        return config.leader_election

    def lease_store(self, settings: LeaderElectionSettings) -> LeaseStore:
        return _LeaseStore(self.connection, settings)

    def own_pod(self) -> OwnPod | None:
        found = _own_pod()
        if found is None:
            return None  # not running in a pod (devcluster, tests): nothing to write on
        namespace, pod = found
        return OwnPod(lambda: self.connection.budgets.control, namespace=namespace, name=pod)

    def agentpools(self, controller: Callable[..., C]) -> C | None:
        client = self.connection.budgets.agentpools
        return controller(client, writes=AgentPoolWriter(client))


def _own_pod() -> tuple[str, str] | None:
    """The coordinator's Pod (namespace, name) from the downward API, when it runs in one."""
    pod, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    return (namespace, pod) if pod and namespace else None


class _Reviewer:
    """TokenReviews through the connection (before it is open: unavailable, a 503)."""

    def __init__(self, connection: KubeConnection, audiences: tuple[str, ...]) -> None:
        self._connection = connection
        self._audiences = audiences

    async def review(self, token: str) -> Review:
        try:
            client = self._connection.budgets.control
        except NotConnected as exc:
            raise ReviewUnavailable(str(exc)) from None
        return await KubeTokenReviewer(client, audiences=self._audiences).review(token)


class _Resolver:
    def __init__(self, connection: KubeConnection) -> None:
        self._connection = connection

    async def node_of(self, namespace: str, pod: str, uid: str | None) -> str | None:
        try:
            client = self._connection.budgets.control
        except NotConnected:
            return None
        return await KubePodNodeResolver(client).node_of(namespace, pod, uid)


class _LeaseStore:
    """The election's Lease through the connection (before it is open: unavailable)."""

    def __init__(self, connection: KubeConnection, settings: LeaderElectionSettings) -> None:
        self._connection = connection
        self._settings = settings

    def _store(self) -> LeaseStore:
        try:
            client = self._connection.budgets.control
        except NotConnected as exc:
            raise LeaseUnavailable(str(exc)) from None
        s = self._settings
        return KubeLeaseStore(client, namespace=s.namespace, name=s.lease_name)

    async def get(self) -> LeaseRecord | None:
        return await self._store().get()

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        return await self._store().create(record)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        return await self._store().update(record)
