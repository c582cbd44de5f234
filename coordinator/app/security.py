"""Wiring the API's protections into the coordinator's application: limits, authentication, TLS.

``SecuritySettings.from_config(sections)`` reads the config file's ``auth``, ``limits`` and ``tls``
sections; :func:`secure_app` installs, in this order after the app's error middleware, the request
limits (so floods never cost a TokenReview) and the authentication middleware, and connects the
Kubernetes client TokenReview needs when the app starts. :meth:`SecuritySettings.ssl_context` is
the listener's TLS context (certificate and key from the mounted Secret).

With no API server (``--in-memory``, the embedded demo) authentication is off unless the config
asks for it, which is an error there (TokenReview needs an API server); the middleware logs that
it is off.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from common.kube import KubeClient
from coordinator.adapters.kube.podnode import KubePodNodeResolver
from coordinator.adapters.kube.tokenreview import (
    CachingReviewer,
    KubeTokenReviewer,
    Review,
    ReviewUnavailable,
)
from coordinator.api.limits import LimitSettings, limits_middleware
from coordinator.app.auth.middleware import install
from coordinator.app.auth.settings import AuthSettings
from coordinator.app.auth.tls import server_context


@dataclass(frozen=True, slots=True, kw_only=True)
class SecuritySettings:
    auth: AuthSettings = field(default_factory=AuthSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    tls_cert_file: Path | None = None
    """Serving certificate (PEM); with ``tls_key_file``, the listener speaks HTTPS."""
    tls_key_file: Path | None = None

    def __post_init__(self) -> None:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls: certFile and keyFile go together")

    @classmethod
    def for_demo(cls) -> SecuritySettings:
        """The embedded demo: loopback only, no API server, authentication off (and logged)."""
        return cls(auth=AuthSettings(enabled=False))

    @classmethod
    def from_config(cls, sections: Mapping[str, Any], *, in_memory: bool) -> SecuritySettings:
        """From the config file's top-level sections (``auth``, ``limits``, ``tls``)."""

        def section(name: str) -> Mapping[str, Any]:
            raw = sections.get(name) or {}
            if not isinstance(raw, Mapping):
                raise ValueError(f"{name} must be a mapping")
            return raw

        auth_raw = section("auth")
        if in_memory:
            if auth_raw.get("enabled", False):
                raise ValueError(
                    "auth.enabled needs an API server (TokenReview); "
                    "it cannot be on with --in-memory"
                )
            auth = AuthSettings.from_mapping({**auth_raw, "enabled": False})
        else:
            auth = AuthSettings.from_mapping(auth_raw)
        tls = section("tls")
        unknown = sorted(set(tls) - {"certFile", "keyFile"})
        if unknown:
            raise ValueError(f"unknown tls setting(s): {', '.join(unknown)}")
        cert, key = tls.get("certFile"), tls.get("keyFile")
        return cls(
            auth=auth,
            limits=LimitSettings.from_mapping(section("limits")),
            tls_cert_file=Path(cert) if cert else None,
            tls_key_file=Path(key) if key else None,
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The listener's TLS context, or None for plain HTTP. Raises TlsConfigError."""
        if self.tls_cert_file is None or self.tls_key_file is None:
            return None
        return server_context(self.tls_cert_file, self.tls_key_file)


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


def secure_app(
    app: web.Application, settings: SecuritySettings, *, kubeconfig: str | None = None
) -> None:
    """Install limits and authentication on ``app`` (before it starts)."""
    app.middlewares.append(limits_middleware(settings.limits))
    if not settings.auth.enabled:
        install(app, settings=settings.auth, reviewer=_NoReviews())
        return
    slot = _ClientSlot()
    reviewer = CachingReviewer(
        _SlotReviewer(slot, settings.auth.audiences),
        ttl_s=settings.auth.cache_ttl_s,
        negative_ttl_s=settings.auth.negative_cache_ttl_s,
        max_entries=settings.auth.cache_max_entries,
    )
    install(app, settings=settings.auth, reviewer=reviewer, resolver=_SlotResolver(slot))
    app.cleanup_ctx.append(slot.context(kubeconfig))
