"""What every ``KubeClient`` verb is built on: the connection, one HTTP exchange (rate limit,
timeout, the non-2xx reply turned into a ``common.kube.errors`` exception) and one JSON call under
the ``RetryPolicy``.

Requests go through the library's ``ApiClient`` (authentication, TLS, token refresh) but ask for
the raw response and decode JSON ourselves: the generated models are slow to build, and some
replies (``pods/binding``) don't even deserialise. Every failure is a ``common.kube.errors``
exception raised ``from`` the library's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, Self, cast

import aiohttp
import msgspec
from kubernetes_asyncio.client import ApiClient

from common.kube.config import load_configuration
from common.kube.direct import DirectTransport
from common.kube.errors import KubeError, Superseded, Unreachable, error_for_status
from common.kube.http1 import CalledOff
from common.kube.ratelimit import RateLimit, TokenBucket
from common.kube.retry import RetryPolicy, call_with_retries
from common.kube.types import KubeObject

_JSON_DECODER = msgspec.json.Decoder()


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSettings:
    """How the client behaves; pass one to ``KubeClient.connect``."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Which failures are retried and how patiently."""
    request_timeout_s: float = 30.0
    """Limit on one ordinary request (not on watches)."""
    watch_idle_timeout_s: float = 330.0
    """A watch with no bytes for this long is considered dead (the server ends watches by
    ``timeoutSeconds``, default 5 minutes, and sends bookmarks about once a minute)."""
    field_manager: str = "topos"
    """Recorded in managedFields for our writes."""
    rate_limit: RateLimit | None = None
    """Client-side QPS/burst over every request of this client (``None``: no limit), as
    client-go's ``rest.Config.QPS``/``Burst``; see ``common.kube.ratelimit``."""
    max_connections: int | None = 100
    """Connections open at once in the client's pool (``None``: no limit; further requests wait
    for one). Watches hold theirs for as long as they run."""
    keepalive_s: float = 60.0
    """How long an idle connection stays in the pool for the next request. aiohttp's default,
    15 s, closes the pool between two bursts of binds and each burst pays a TLS handshake per
    connection again; kube-apiserver keeps an idle connection 90 s, so a minute is reused
    safely."""
    deferrable_connections: int | None = 8
    """Deferrable requests (Events and status explanations: :class:`Deferrable`) on their own
    connections at once: beyond this many, one that finds no idle connection waits for one of
    theirs to finish instead of opening another (``None``: no limit). Each new connection is a
    TLS handshake (1.4-2.5 ms of client CPU, against 0.2-0.3 ms for a request on a kept one:
    ``common.kube.http1``), and over HTTP/1.1 the pool grows to the requests in flight at its
    peak: binds and their Events together, 64 each, had it at ~128 connections. And the API
    server's other clients share its writes: with 16 at once, upstream's scheduler_perf created
    its pods at 240-255/s beside Topos (SchedulingDaemonset) against 288-310/s with 2-8 and
    ~300/s beside kube-scheduler, and 348-358/s against 455-612/s with 2-4 in EventHandlingPodAdd,
    where kube-scheduler's turns saw 405-502/s (kube-scheduler writes its Events one at a time).
    The Events then trail the binds under a burst: with 8, 598-725 of SchedulingDaemonset's 1,000
    Scheduled Events written at the last bind, the rest within 0.7-1.0 s (with 4: 345-386, 1.8-1.9
    s); fewer connections are opened (23-29 against 44-49). Measured again on 2026-12-02
    (PreferredTopologySpreading, two invocations of two rounds each per setting): with 32, every
    Event was written by the last bind, but the benchmark created 209-225 pods/s in Topos' turns
    against 228-252 with 8, and Topos' pods/s was 0.95x kube-scheduler's against 0.97-1.06x."""
    reuse_connections_above: int | None = 16
    """The other requests (binds) on the lean pool's connections at once beyond which one more
    that finds no idle connection waits for one of theirs to come back instead of opening
    another; while none comes back to a waiting request for ``reuse_wait_s``, one of them opens
    its own each such wait (``None``: it opens one at once)."""
    reuse_wait_s: float = 0.5
    """How long no connection may come back to a waiting request before one of the waiting
    requests opens its own (a stalled server, not a busy one)."""


def _always() -> bool:
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class Deferrable:
    """A request that may wait: under the client's rate limit it yields to every request that
    is not deferrable (``TokenBucket.wait(deferrable=True)``), on the lean pool it waits for a
    connection beyond ``ClientSettings.deferrable_connections``, and once its turn comes (it has
    its connection) ``send_now()`` is asked, right before it is sent (and before each retry):
    ``False`` calls it off with :class:`~common.kube.errors.Superseded`. Events and status
    explanations are deferrable; binds are not, so binds never wait behind them."""

    send_now: Callable[[], bool] = _always


class KubeClientCore:
    """Connecting, closing, and sending requests; the verbs are added by subclasses."""

    def __init__(self, api_client: Any, *, settings: ClientSettings | None = None) -> None:
        self._api = api_client
        self.settings = settings or ClientSettings()
        limit = self.settings.rate_limit
        self._bucket: TokenBucket | None = None if limit is None else TokenBucket(limit)
        self._request_timeout = aiohttp.ClientTimeout(total=self.settings.request_timeout_s)
        self._transport = DirectTransport.of(
            api_client,
            deferrable_limit=self.settings.deferrable_connections,
            reuse_above=self.settings.reuse_connections_above,
            reuse_wait_s=self.settings.reuse_wait_s,
        )
        self._owns_connection = True

    def budget(self, rate_limit: RateLimit | None) -> Self:
        """A client over this one's connection (session, connection pool, credentials) with a
        rate limit of its own, as client-go's clientsets built from one ``rest.Config`` share a
        transport but not a rate limiter. Closing it closes nothing: the connection is this
        client's."""
        shared = type(self)(self._api, settings=replace(self.settings, rate_limit=rate_limit))
        shared._owns_connection = False
        shared._transport = self._transport  # one pool of connections, as one session
        return shared

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        settings: ClientSettings | None = None,
    ) -> Self:
        """A client for ``kubeconfig`` (else ``$KUBECONFIG``, in-cluster, ``~/.kube/config``)."""
        configuration = await load_configuration(kubeconfig, context=context)
        settings = settings or ClientSettings()
        configuration.connection_pool_maxsize = settings.max_connections
        api = ApiClient(configuration)
        _skip_environment_lookups(api)
        _keep_alive(api, settings.keepalive_s)
        return cls(api, settings=settings)

    async def close(self) -> None:
        if self._owns_connection:
            if self._transport is not None and self._transport.pool is not None:
                await self._transport.pool.close()
            await self._api.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _admit(
        self, method: str, path: str, deferrable: Deferrable | None, *, ask: bool = True
    ) -> None:
        """The request's turn under the rate limit; a deferrable one called off raises (asked
        here unless ``ask`` is false: the pool asks it once the request has a connection)."""
        if self._bucket is not None:
            await self._bucket.wait(deferrable=deferrable is not None)
        if ask and deferrable is not None and not deferrable.send_now():
            raise Superseded(f"{method} {path}: called off before it was sent")

    async def _exchange(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None,
        body: Any,
        content_type: str,
        deferrable: Deferrable | None,
    ) -> bytes:
        """One request whose reply is read whole, on the transport's own pool (see
        ``common.kube.http1``): the 2xx reply's body, or the matching ``KubeError``."""
        assert self._transport is not None
        await self._admit(method, path, deferrable, ask=False)
        try:
            reply = await self._transport.exchange(
                method,
                path,
                query=query,
                body=body,
                content_type=content_type,
                timeout_s=self.settings.request_timeout_s,
                deferrable=None if deferrable is None else deferrable.send_now,
            )
        except CalledOff as exc:
            raise Superseded(str(exc)) from exc
        except (TimeoutError, OSError) as exc:
            raise Unreachable(f"{method} {path}: {exc or type(exc).__name__}") from exc
        if 200 <= reply.status < 300:
            return reply.body
        raise _error_from_reply(
            reply.status, reply.reason, reply.headers.get("retry-after"), reply.body, method, path
        )

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        client_timeout: aiohttp.ClientTimeout | None = None,
        deferrable: Deferrable | None = None,
    ) -> aiohttp.ClientResponse:
        """One HTTP exchange; a non-2xx reply becomes the matching ``KubeError``."""
        await self._admit(method, path, deferrable)
        timeout = client_timeout or self._request_timeout
        try:
            if self._transport is not None:
                response = await self._transport.send(
                    method,
                    path,
                    query=query,
                    body=body,
                    content_type=content_type,
                    client_timeout=timeout,
                )
            else:
                response = cast(
                    aiohttp.ClientResponse,
                    await self._api.call_api(
                        path,
                        method,
                        query_params=list((query or {}).items()),
                        header_params={"Content-Type": content_type, "Accept": "application/json"},
                        body=body,
                        auth_settings=["BearerToken"],
                        _preload_content=False,
                        _request_timeout=timeout,
                    ),
                )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise Unreachable(f"{method} {path}: {exc or type(exc).__name__}") from exc
        if 200 <= response.status < 300:
            return response
        try:
            raw = await response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise Unreachable(f"{method} {path}: {exc}") from exc
        finally:
            response.release()
        raise _error_from_reply(
            response.status, response.reason, response.headers.get("Retry-After"), raw, method, path
        )

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        deferrable: Deferrable | None = None,
    ) -> KubeObject:
        """A request whose reply is one JSON object, under the retry policy."""

        async def attempt() -> KubeObject:
            pooled = self._transport is not None and self._transport.exchanges(path)
            read = self._exchange if pooled else self._send_and_read
            raw = await read(
                method,
                path,
                query=query,
                body=body,
                content_type=content_type,
                deferrable=deferrable,
            )
            try:
                decoded = _JSON_DECODER.decode(raw) if raw else {}
            except msgspec.DecodeError as exc:
                raise KubeError(f"{method} {path}: reply is not JSON: {exc}") from exc
            if not isinstance(decoded, dict):
                raise KubeError(f"{method} {path}: reply is not a JSON object")
            return decoded

        return await call_with_retries(self.settings.retry, method, attempt)

    async def _send_and_read(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None,
        body: Any,
        content_type: str,
        deferrable: Deferrable | None,
    ) -> bytes:
        """As :meth:`_exchange`, through the aiohttp session (a proxy, a path to encode)."""
        response = await self._send(
            method, path, query=query, body=body, content_type=content_type, deferrable=deferrable
        )
        try:
            return await response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise Unreachable(f"{method} {path}: {exc}") from exc
        finally:
            response.release()


_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def _skip_environment_lookups(api: Any) -> None:
    """Stop aiohttp from consulting the environment on every request when that can't matter.

    kubernetes_asyncio opens its session with ``trust_env=True``, so for *each* request aiohttp
    looks for proxy variables and a ``~/.netrc`` entry, both in worker threads: two thread hops
    per call (py-spy: the largest per-request cost of the coordinator under load, beside TLS).
    With no proxy variable set neither lookup can change a request to the API server (its
    credentials are the kubeconfig's certificate or token, never netrc), so switch them off;
    with one set, keep aiohttp's behaviour.
    """
    if any(os.environ.get(v) or os.environ.get(v.upper()) for v in _PROXY_VARIABLES):
        return
    session = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    if isinstance(session, aiohttp.ClientSession) and hasattr(session, "_trust_env"):
        session._trust_env = False


def _keep_alive(api: Any, seconds: float) -> None:
    """Keep idle connections ``seconds`` (kubernetes_asyncio builds its connector with aiohttp's
    default, which has no setter)."""
    session = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    connector = getattr(session, "connector", None)
    if isinstance(connector, aiohttp.BaseConnector) and hasattr(connector, "_keepalive_timeout"):
        connector._keepalive_timeout = seconds


def _error_from_reply(
    status: int,
    reason: str | None,
    retry_after_header: str | None,
    raw: bytes,
    method: str,
    path: str,
) -> KubeError:
    body: dict[str, Any] | None = None
    try:
        decoded = _JSON_DECODER.decode(raw) if raw else None
        if isinstance(decoded, dict):
            body = decoded
    except msgspec.DecodeError:
        body = None
    if body is None:
        text = raw.decode("utf-8", "replace").strip()[:300]
        body = {"message": f"{method} {path}: {text or reason or 'no body'}"}
    retry_after: float | None = None
    if retry_after_header:
        try:
            retry_after = float(retry_after_header)
        except ValueError:
            retry_after = None
    return error_for_status(status, body, retry_after_s=retry_after)
