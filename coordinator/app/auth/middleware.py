"""The aiohttp side of authentication: a middleware the API app installs, and the stream's check.

``install(app, settings=…, reviewer=…)`` adds the middleware and keeps a :class:`NodeGuard` on the
app. The middleware classifies each request (:mod:`coordinator.app.auth.access`), reviews its bearer
token when one is needed and stores the caller's :class:`Identity` under ``IDENTITY_KEY``. Failures
are JSON errors like the rest of the API: 401 without a valid token (with ``WWW-Authenticate``),
403 for an identity that may not use the route, 503 when the API server can't review tokens.

The stream handler calls :func:`authorize_node_report` with the node named in the agent's
``hello`` and closes the stream with the verdict's reason when it is refused.
"""

from __future__ import annotations

import logging
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from coordinator.adapters.kube.identity import ANONYMOUS_DEMO, Identity
from coordinator.adapters.kube.tokenreview import ReviewUnavailable, TokenReviewer
from coordinator.api.errors import ApiError, error_response
from coordinator.app.auth.access import Access, classify
from coordinator.app.auth.agents import NodeGuard, NodeVerdict, PodNodeResolver
from coordinator.app.auth.settings import AuthSettings

_log = logging.getLogger("topos.coordinator.app.auth")

IDENTITY_KEY: Final = web.RequestKey("topos.identity", Identity)
NODE_GUARD_KEY: Final = web.AppKey("topos.node_guard", NodeGuard)
AUTH_SETTINGS_KEY: Final = web.AppKey("topos.auth_settings", AuthSettings)

AUTH_DISABLED_WARNING: Final = (
    "authentication is OFF: every request is accepted without a token "
    "(embedded demo only; never run a cluster like this)"
)


def _error(
    request: web.Request, status: int, code: str, message: str, *, challenge: bool = False
) -> web.Response:
    response = error_response(request, status, code, message)
    if challenge:
        response.headers["WWW-Authenticate"] = 'Bearer realm="topos"'
    return response


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


def auth_middleware(settings: AuthSettings, reviewer: TokenReviewer) -> Middleware:
    """The middleware; ``reviewer`` is normally a CachingReviewer over the API server."""
    if not settings.enabled:
        _log.warning(AUTH_DISABLED_WARNING)

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        access = classify(request.method, request.path)
        if not settings.enabled:
            request[IDENTITY_KEY] = ANONYMOUS_DEMO
            return await handler(request)
        if access is Access.PUBLIC or (access is Access.READ and settings.open_read_only):
            return await handler(request)
        token = _bearer(request)
        if token is None:
            message = "a bearer token is required"
            return _error(request, 401, "unauthorized", message, challenge=True)
        if len(token) > settings.max_token_bytes:
            return _error(request, 401, "unauthorized", "bearer token too long", challenge=True)
        try:
            review = await reviewer.review(token)
        except ReviewUnavailable as exc:
            _log.warning("token review unavailable: %s", exc)
            return _error(request, 503, "unavailable", "cannot verify tokens right now; retry")
        if review.identity is None:
            _log.info("rejected token from %s: %s", request.remote, review.error)
            return _error(request, 401, "unauthorized", "invalid bearer token", challenge=True)
        identity = review.identity
        if access is Access.AGENT and not settings.is_agent(identity):
            _log.info("refused %s on the agent stream", identity.describe())
            message = f"{identity.username} may not open the agent stream"
            return _error(request, 403, "forbidden", message)
        request[IDENTITY_KEY] = identity
        return await handler(request)

    return authenticate


def install(
    app: web.Application,
    *,
    settings: AuthSettings,
    reviewer: TokenReviewer,
    resolver: PodNodeResolver | None = None,
) -> None:
    """Wire authentication into ``app`` (call before the app starts)."""
    app.middlewares.append(auth_middleware(settings, reviewer))
    app[AUTH_SETTINGS_KEY] = settings
    app[NODE_GUARD_KEY] = NodeGuard(settings, resolver=resolver)


def identity_of(request: web.Request) -> Identity | None:
    """The caller, or None for a request that was let through without a token."""
    return request.get(IDENTITY_KEY)


async def authorize_node_report(request: web.Request, node: str) -> NodeVerdict:
    """May the caller of ``request`` report ``node``? Allowed when auth is not installed/off."""
    guard = request.app.get(NODE_GUARD_KEY)
    if guard is None:
        return NodeVerdict(True)
    return await guard.check(identity_of(request), node)


async def agent_node(request: web.Request) -> str | None:
    """Before the stream's upgrade: the node this caller may report (``None``: any, auth off).

    The ``agent_auth`` of ``coordinator.app.web.build_app``. Relies on the middleware having
    authenticated the request; raises ``ApiError`` 401/403 otherwise, or when the identity has
    no node of its own.
    """
    guard = request.app.get(NODE_GUARD_KEY)
    if guard is None:
        return None
    identity = identity_of(request)
    verdict = await guard.node_for(identity)
    if not verdict.allowed:
        status, code = (401, "unauthorized") if identity is None else (403, "forbidden")
        raise ApiError(status, code, verdict.reason)
    return verdict.node
