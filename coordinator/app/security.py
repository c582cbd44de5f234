"""Wiring the API's protections into the coordinator's application: limits, authentication, TLS.

:func:`secure_app` installs, from the config tree's ``limits`` and ``auth`` sections and in this
order after the app's error middleware, the request limits (so floods never cost a TokenReview)
and the authentication middleware, with the backend's token reviewer (TokenReview, through the
backend's connection to the API server). :func:`listener_tls` is the listener's TLS context from
the ``tls`` section (certificate and key from the mounted Secret).

With no API server (``--in-memory``, the embedded demo) authentication is off unless the config
asks for it, which is an error there (TokenReview needs an API server); the middleware logs that
it is off.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from aiohttp import web

from coordinator.adapters.kube.tokenreview import Review, ReviewUnavailable
from coordinator.api.limits import limits_middleware
from coordinator.app.auth.middleware import install
from coordinator.app.auth.tls import server_context
from coordinator.app.backend import Backend
from coordinator.app.config.sections import Config, TlsSection


def listener_tls(tls: TlsSection) -> ssl.SSLContext | None:
    """The listener's TLS context, or None for plain HTTP. Raises TlsConfigError."""
    if tls.cert_file is None or tls.key_file is None:
        return None
    return server_context(Path(tls.cert_file), Path(tls.key_file))


class _NoReviews:
    async def review(self, token: str) -> Review:
        raise ReviewUnavailable("authentication is off")


def secure_app(app: web.Application, config: Config, backend: Backend) -> None:
    """Install the request limits and authentication on ``app`` (before it starts). Raises
    ValueError for authentication asked of a backend without an API server."""
    app.middlewares.append(limits_middleware(config.limits))
    auth = backend.authentication(config.auth)
    reviewer = auth.reviewer if auth.reviewer is not None else _NoReviews()
    install(app, settings=auth.settings, reviewer=reviewer, resolver=auth.resolver)
