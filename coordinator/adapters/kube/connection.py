"""The coordinator's one connection to the API server, and the rate-limit budgets over it.

A coordinator process opens one :class:`KubeConnection` when its app starts (the kubeconfig read
once, one ``aiohttp`` session and the lean pool beside it for JSON requests
(``common.kube.http1``): one TLS context, one token refresh) and
closes it when the app stops. Every part of the process talks to the API server through one of
its clients, each a *budget* — a ``KubeClient`` over the shared session with a rate limit of its
own (``KubeClient.budget``), as kube-scheduler's clientsets share one transport but not a rate
limiter:

- ``scheduler``: the ``kube`` section's limit (``qps``/``burst``) over the scheduler's watches,
  binds, evictions, nominations and PodGroup status writes;
- ``events``: the same limit again, for Events and ``PodScheduled`` explanations only — a second
  budget on purpose, as kube-scheduler's ``eventClient``: however many Events are queued they
  never take a bind's turn, and binds never starve the explanations;
- ``agentpools``: the same limit again, for the AgentPool controller (its watches and the
  Deployments and status it writes), which kube-scheduler would not run at all: it is a
  controller of its own and must not spend the scheduler's budget;
- ``control``: no limit, for what must never wait behind a bind — the inventory's Node and Pod
  watches, the leader-election Lease, TokenReviews and pod lookups of agents logging in, and
  writes on the coordinator's own Pod.

The pool has no connection limit (``ClientSettings.max_connections=None``): over HTTP/1.1 each
request in flight holds a connection, and a shared limit would let binds queue behind the
inventory's watches or a Lease renewal behind binds. What is in flight is bounded by its callers
instead: binds by ``scheduler.maxBindsInFlight``, Events and status writes by the scheduler's
background writes (64 at once) and, on the lean pool, by
``ClientSettings.deferrable_connections`` (8 connections at once; more wait for one of those,
never for a bind's), watches by their number, the rest by their budget's rate. The lean pool
adds no limit either, only a preference: beyond ``ClientSettings.reuse_connections_above`` (16)
connections carrying other requests, one more (a bind, a Lease renewal) that finds none idle
waits for one of those to come back — a few milliseconds while the server answers; while none
comes back for ``reuse_wait_s`` (half a second), one of the waiting requests opens its own each
half second. Idle connections are kept a minute (``ClientSettings.keepalive_s``) for the next
burst.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from common.kube import ClientSettings, KubeClient, RateLimit

__all__ = ["Budgets", "KubeConnection", "NotConnected"]


class NotConnected(Exception):
    """A client was asked for before the connection was opened (or after it was closed)."""


@dataclass(frozen=True, slots=True)
class Budgets:
    """The clients over one open connection (see the module doc for who uses which)."""

    scheduler: KubeClient
    events: KubeClient
    agentpools: KubeClient
    control: KubeClient


class KubeConnection:
    """One process's connection; :meth:`open` it before asking for :attr:`budgets`."""

    def __init__(
        self, kubeconfig: str | os.PathLike[str] | None, *, rate_limit: RateLimit | None = None
    ) -> None:
        self.kubeconfig = kubeconfig
        self.rate_limit = rate_limit
        self._owner: KubeClient | None = None
        self._budgets: Budgets | None = None
        self.opened = 0
        """How many times this connection was opened (one per app start)."""

    @property
    def budgets(self) -> Budgets:
        if self._budgets is None:
            raise NotConnected("the coordinator is not connected to the API server yet")
        return self._budgets

    async def open(self) -> None:
        if self._owner is not None:
            raise RuntimeError("the connection to the API server is open already")
        owner = await KubeClient.connect(
            self.kubeconfig, settings=ClientSettings(max_connections=None)
        )
        self._owner = owner
        self.opened += 1
        limit = self.rate_limit
        self._budgets = Budgets(
            scheduler=owner.budget(limit),
            events=owner.budget(limit),
            agentpools=owner.budget(limit),
            control=owner,
        )

    async def close(self) -> None:
        owner, self._owner, self._budgets = self._owner, None, None
        if owner is not None:
            await owner.close()
