"""Wiring the API's protections into the coordinator's application: limits, authentication, TLS.

:func:`secure_app` installs, from the config tree's ``limits`` and ``auth`` sections and in this
order after the app's error middleware, the request limits (so floods never cost a TokenReview)
and the authentication middleware, and connects the Kubernetes client TokenReview needs when the
app starts. :func:`listener_tls` is the listener's TLS context from the ``tls`` section
(certificate and key from the mounted Secret).

With no API server (``--in-memory``, the embedded demo) authentication is off unless the config
asks for it, which is an error there (TokenReview needs an API server); the middleware logs that
it is off.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from aiohttp import web

from common.kube import KubeClient
from coordinator.adapters.kube.podnode import KubePodNodeResolver
from coordinator.adapters.kube.tokenreview import (
    CachingReviewer,
    KubeTokenReviewer,
    Review,
    ReviewUnavailable,
)
from coordinator.api.limits import limits_middleware
from coordinator.app.auth.middleware import install
from coordinator.app.auth.settings import AuthSettings
from coordinator.app.auth.tls import server_context
from coordinator.app.backend import Backend, MemoryBackend
from coordinator.app.config.sections import Config, TlsSection


def listener_tls(tls: TlsSection) -> ssl.SSLContext | None:
    """The listener's TLS context, or None for plain HTTP. Raises TlsConfigError."""
    if tls.cert_file is None or tls.key_file is None:
        return None
    return server_context(Path(tls.cert_file), Path(tls.key_file))


class _ClientSlot:
    """The Kubernetes client, connected when the app starts (reviews before that: 503)."""

    def __init__(self) -> None:
        self.client: KubeClient | None = None

    def context(self, kubeconfig: str | None) -> Callable[[web.Application], AsyncIterator[None]]:
        async def connected(app: web.Application) -> AsyncIterator[None]:
            self.client = await KubeClient.connect(kubeconfig)
            try:
                yield
            finally:
                client, self.client = self.client, None
                await client.close()

        return connected


class _SlotReviewer:
    def __init__(self, slot: _ClientSlot, audiences: tuple[str, ...]) -> None:
        self._slot = slot
        self._audiences = audiences

    async def review(self, token: str) -> Review:
        if self._slot.client is None:
            raise ReviewUnavailable("the coordinator is not connected to the API server yet")
        return await KubeTokenReviewer(self._slot.client, audiences=self._audiences).review(token)


class _SlotResolver:
    def __init__(self, slot: _ClientSlot) -> None:
        self._slot = slot

    async def node_of(self, namespace: str, pod: str, uid: str | None) -> str | None:
        if self._slot.client is None:
            return None
        return await KubePodNodeResolver(self._slot.client).node_of(namespace, pod, uid)


class _NoReviews:
    async def review(self, token: str) -> Review:
        raise ReviewUnavailable("authentication is off")


def secure_app(app: web.Application, config: Config, backend: Backend) -> None:
    """Install the request limits and authentication on ``app`` (before it starts). Raises
    ValueError for authentication asked of a backend without an API server."""
    app.middlewares.append(limits_middleware(config.limits))
    if isinstance(backend, MemoryBackend):
        if config.auth is not None and config.auth.enabled:
            raise ValueError(
                "auth.enabled needs an API server (TokenReview); it cannot be on with --in-memory"
            )
        install(app, settings=config.auth or AuthSettings(enabled=False), reviewer=_NoReviews())
        return
    auth = config.auth or AuthSettings()
    if not auth.enabled:
        install(app, settings=auth, reviewer=_NoReviews())
        return
    slot = _ClientSlot()
    reviewer = CachingReviewer(
        _SlotReviewer(slot, auth.audiences),
        ttl_s=auth.cache_ttl_s,
        negative_ttl_s=auth.negative_cache_ttl_s,
        max_entries=auth.cache_max_entries,
    )
    install(app, settings=auth, reviewer=reviewer, resolver=_SlotResolver(slot))
    app.cleanup_ctx.append(slot.context(backend.kubeconfig))
