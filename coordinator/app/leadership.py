"""Leader election wired into the coordinator's application (docs/design.md §6).

:func:`elect_leader` puts a :class:`~coordinator.app.election.LeaderElector` on the app under
``LEADER`` (the binder asks ``app[LEADER].is_leader()`` before every bind) and campaigns while
the app runs. The leader labels its own pod ``topos.io/leader=true``, which is what the
coordinator Service selects, so agents' streams and ``kubectl topos`` reach the leader; it
removes the label when it stops leading, and every coordinator clears a stale label from its pod
when it starts (a restarted container keeps its pod).

Against an API server the election is on unless the config's ``leaderElection`` section turns
it off (``enabled: false``), or names none and the scheduler is off (that coordinator never binds):
two coordinators started on one cluster never both bind. Without an
API server (``--in-memory``, the demo) the elector is disabled: this process always leads and
nothing is written anywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from typing import Final

from aiohttp import web

from common.kube import PODS, KubeClient, KubeError
from coordinator.adapters.kube.lease import (
    KubeLeaseStore,
    LeaseRecord,
    LeaseStore,
    LeaseUnavailable,
)
from coordinator.api.keys import READINESS
from coordinator.app.election import LeaderElectionSettings, LeaderElector

_log = logging.getLogger("topos.coordinator.app.election")

LEADER: Final = web.AppKey("topos.leader", LeaderElector)
LEADER_LABEL: Final = "topos.io/leader"
#: The ``/readyz`` check: false until the Lease was read, and while it cannot be written at all
#: (its namespace does not exist, RBAC forbids it) — a coordinator that can never lead is not ready.
READY_CHECK: Final = "leaderElection"


class _LazyLeaseStore:
    """A LeaseStore whose client is connected when the app starts."""

    def __init__(self, settings: LeaderElectionSettings) -> None:
        self._settings = settings
        self.client: KubeClient | None = None

    def _store(self) -> LeaseStore:
        if self.client is None:
            raise LeaseUnavailable("not connected to the API server yet")
        s = self._settings
        return KubeLeaseStore(self.client, namespace=s.namespace, name=s.lease_name)

    async def get(self) -> LeaseRecord | None:
        return await self._store().get()

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        return await self._store().create(record)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        return await self._store().update(record)


async def _label_own_pod(client: KubeClient, leading: bool) -> None:
    pod, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not pod or not namespace:
        return  # not running in a pod (devcluster, tests): nothing to label
    patch = {"metadata": {"labels": {LEADER_LABEL: "true" if leading else None}}}
    try:
        await client.patch(PODS, pod, patch, namespace=namespace)
    except KubeError as exc:
        _log.warning(
            "cannot set %s=%s on pod %s/%s: %s", LEADER_LABEL, leading, namespace, pod, exc
        )


def elect_leader(
    app: web.Application,
    settings: LeaderElectionSettings | None,
    *,
    kubeconfig: str | None = None,
) -> LeaderElector:
    """Put the elector on ``app`` and campaign while it runs (``None``: no election, this process
    always leads); returns the elector."""
    settings = settings or LeaderElectionSettings(enabled=False)
    store = _LazyLeaseStore(settings)
    client_box: list[KubeClient] = []

    async def started() -> None:
        if client_box:
            await _label_own_pod(client_box[0], True)

    async def stopped() -> None:
        if client_box:
            await _label_own_pod(client_box[0], False)

    def trouble(problem: str | None) -> None:
        app[READINESS].set(READY_CHECK, problem is None, reason=problem)

    elector = LeaderElector(
        store,
        settings,
        on_started_leading=started,
        on_stopped_leading=stopped,
        on_trouble=trouble,
    )
    app[LEADER] = elector
    if settings.enabled:
        app[READINESS].set(READY_CHECK, False, reason=elector.trouble)
        app.cleanup_ctx.append(_campaign(elector, store, client_box, kubeconfig))
    return elector


def _campaign(
    elector: LeaderElector,
    store: _LazyLeaseStore,
    client_box: list[KubeClient],
    kubeconfig: str | None,
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        client = await KubeClient.connect(kubeconfig)
        store.client = client
        client_box.append(client)
        await _label_own_pod(client, False)  # a label left from before a restart
        task = asyncio.create_task(elector.run(), name="leader-election")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            store.client = None
            client_box.clear()
            await client.close()

    return ctx
