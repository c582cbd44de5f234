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
nothing is written anywhere. The Lease and the Pod are the backend's
(``Backend.lease_store``, ``Backend.own_pod``): their writes are :mod:`coordinator.adapters.kube`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Final

from aiohttp import web

from coordinator.api.keys import READINESS
from coordinator.app.backend import Backend, PodWriter
from coordinator.app.election import LeaderElectionSettings, LeaderElector

LEADER: Final = web.AppKey("topos.leader", LeaderElector)
LEADER_LABEL: Final = "topos.io/leader"
#: The ``/readyz`` check: false until the Lease was read, and while it cannot be written at all
#: (its namespace does not exist, RBAC forbids it) — a coordinator that can never lead is not ready.
READY_CHECK: Final = "leaderElection"


def elect_leader(
    app: web.Application,
    settings: LeaderElectionSettings | None,
    *,
    backend: Backend,
) -> LeaderElector:
    """Put the elector on ``app`` and campaign while it runs, on ``backend``'s Lease (``None``:
    no election, this process always leads); returns the elector."""
    settings = settings or LeaderElectionSettings(enabled=False)
    pod = backend.own_pod()

    async def started() -> None:
        if pod is not None:
            await pod.label(LEADER_LABEL, "true")

    async def stopped() -> None:
        if pod is not None:
            await pod.label(LEADER_LABEL, None)

    def trouble(problem: str | None) -> None:
        app[READINESS].set(READY_CHECK, problem is None, reason=problem)

    elector = LeaderElector(
        backend.lease_store(settings),
        settings,
        on_started_leading=started,
        on_stopped_leading=stopped,
        on_trouble=trouble,
    )
    app[LEADER] = elector
    if settings.enabled:
        app[READINESS].set(READY_CHECK, False, reason=elector.trouble)
        app.cleanup_ctx.append(_campaign(elector, pod))
    return elector


def _campaign(
    elector: LeaderElector, pod: PodWriter | None
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        if pod is not None:
            await pod.label(LEADER_LABEL, None)  # a label left from before a restart
        task = asyncio.create_task(elector.run(), name="leader-election")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return ctx
