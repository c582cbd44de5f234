"""Send a request on kubernetes_asyncio's own session without its generic ``call_api`` machinery.

``ApiClient.call_api`` is written for generated models: for every request it copies and
"sanitises" the headers, query and body recursively (``sanitize_for_serialization``), turns them
into tuples, looks the auth settings up by name, routes by method through ``RESTClientObject``,
re-checks the content type with a regular expression and encodes the body with ``json.dumps``.
py-spy put that at a good part of the coordinator's per-bind CPU. ``KubeClient`` already speaks
plain JSON, so :class:`DirectTransport` does the same exchange directly:

- the same ``aiohttp.ClientSession`` (so the same connection pool, TLS context with the
  kubeconfig's client certificate and CA, ``server_hostname``, proxy settings);
- the same headers: the client's default headers (``User-Agent``), its cookie if any,
  ``Content-Type``/``Accept``, and the ``authorization`` header from
  ``Configuration.auth_settings()`` asked *per request*, so token refresh hooks (exec plugins,
  in-cluster token rotation) keep working exactly as before;
- the body encoded by msgspec (compact UTF-8 JSON) instead of ``json.dumps``;
- the URL handed to aiohttp already parsed (:meth:`DirectTransport.url`): from a string, yarl
  parses and re-quotes it on every request (~15 µs for a path not seen before: every bind's),
  while the server's part is parsed once and the path, which ``common.kube.resources`` has
  percent-encoded, is taken as it is.

The reply is the raw ``aiohttp.ClientResponse``, as ``call_api(_preload_content=False)`` returns;
status handling and error mapping stay in ``KubeClient._send``.

Requests whose reply is one JSON object (every verb but watches and streams: binds, Events,
patches) go further down with :meth:`DirectTransport.exchange`: the same headers and body on a
:class:`~common.kube.http1.Http1Pool` beside the session — the session's TLS context and server
name, connections of its own — and not through ``ClientSession.request`` at all, about a third of
its CPU per request (see ``common.kube.http1``). Only where the server is a plain ``http``/
``https`` URL with no credentials in it and no proxy is set (nor a proxy variable in the
environment: the session then still trusts it, ``core._skip_environment_lookups``); otherwise
:meth:`exchange` is not offered (``pool`` is ``None``) and those requests go through the session
too.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Mapping
from typing import Any, Self
from urllib.parse import urlencode

import aiohttp
import msgspec
from yarl import URL

from common.kube.http1 import Http1Pool, Reply

__all__ = ["DirectTransport"]

_ENCODER = msgspec.json.Encoder()
#: A path taken as it is (already percent-encoded): RFC 3986's path characters, nothing else.
_ENCODED_PATH = re.compile(r"/[A-Za-z0-9\-._~%!$&'()*+,;=:@/]*")


class DirectTransport:
    """Requests on an ``ApiClient``'s session; build with :meth:`of`."""

    __slots__ = ("_api", "_base", "_configuration", "_extra", "_host", "_session", "pool")

    def __init__(
        self,
        api_client: Any,
        session: aiohttp.ClientSession,
        *,
        deferrable_limit: int | None = None,
        reuse_above: int | None = None,
        reuse_wait_s: float = 0.0,
    ) -> None:
        self._api = api_client
        self._configuration = api_client.configuration
        self._session = session
        rest = api_client.rest_client
        extra: dict[str, Any] = {}
        if getattr(rest, "proxy", None):
            extra["proxy"] = rest.proxy
        if getattr(rest, "proxy_headers", None):
            extra["proxy_headers"] = rest.proxy_headers
        if getattr(rest, "server_hostname", None):
            extra["server_hostname"] = rest.server_hostname
        self._extra = extra
        self._host = ""  # the configuration's server, as last parsed into _base
        self._base: tuple[str, str, str] | None = None  # its scheme, authority, path prefix
        self.pool: Http1Pool | None = None
        """Where :meth:`exchange` sends (``None``: not offered)."""
        host = getattr(self._configuration, "host", "")
        if isinstance(host, str) and host and "proxy" not in extra:
            self.pool = _pool_for(host, session, extra.get("server_hostname"))
        if self.pool is not None:
            self.pool.deferrable_limit = deferrable_limit
            self.pool.reuse_above, self.pool.reuse_wait_s = reuse_above, reuse_wait_s

    @classmethod
    def of(
        cls,
        api_client: Any,
        *,
        deferrable_limit: int | None = None,
        reuse_above: int | None = None,
        reuse_wait_s: float = 0.0,
    ) -> Self | None:
        """A transport over ``api_client``'s session, or ``None`` when it has none we know
        (the pool's :attr:`~Http1Pool.deferrable_limit`, :attr:`~Http1Pool.reuse_above`,
        :attr:`~Http1Pool.reuse_wait_s`)."""
        rest = getattr(api_client, "rest_client", None)
        session = getattr(rest, "pool_manager", None)
        if not isinstance(session, aiohttp.ClientSession):
            return None
        if getattr(api_client, "configuration", None) is None:
            return None
        return cls(
            api_client,
            session,
            deferrable_limit=deferrable_limit,
            reuse_above=reuse_above,
            reuse_wait_s=reuse_wait_s,
        )

    async def headers(self, content_type: str) -> dict[str, str]:
        """The headers ``call_api`` would send (auth asked for now: tokens may rotate)."""
        headers: dict[str, str] = dict(self._api.default_headers)
        cookie = getattr(self._api, "cookie", None)
        if cookie:
            headers["Cookie"] = cookie
        headers["Content-Type"] = content_type
        headers["Accept"] = "application/json"
        bearer = (await self._configuration.auth_settings()).get("BearerToken")
        if bearer and bearer.get("value"):
            headers[str(bearer["key"])] = str(bearer["value"])
        return headers

    def url(self, path: str, query: Mapping[str, str | int] | None) -> URL | str:
        """The request's URL: parsed here when the server's is absolute and ``path`` is
        percent-encoded, else the string (aiohttp parses it)."""
        host = self._configuration.host
        if host != self._host:  # parsed once (again only if the configuration's changes)
            base = URL(host)
            self._host = host
            self._base = None
            if base.absolute and not base.raw_query_string and not base.raw_fragment:
                self._base = (base.scheme, base.raw_authority, base.raw_path.rstrip("/"))
        qs = urlencode(list(query.items())) if query else ""
        if self._base is None or not _ENCODED_PATH.fullmatch(path):
            return f"{host}{path}?{qs}" if qs else host + path
        scheme, authority, prefix = self._base
        return URL.build(
            scheme=scheme,
            authority=authority,
            path=prefix + path,
            query_string=qs,
            encoded=True,
        )

    def exchanges(self, path: str) -> bool:
        """Whether :meth:`exchange` may send to ``path`` (a pool, and the path percent-encoded;
        else the session, which encodes it)."""
        return self.pool is not None and _ENCODED_PATH.fullmatch(path) is not None

    async def exchange(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None,
        body: Any,
        content_type: str,
        timeout_s: float | None,
        deferrable: Callable[[], bool] | None = None,
    ) -> Reply:
        """One request on :attr:`pool`, its reply read whole (only where :meth:`exchanges`);
        ``deferrable``: see :meth:`Http1Pool.exchange`."""
        assert self.pool is not None
        if self._configuration.host != self._host:
            self.url(path, query)  # the configuration's server changed: parse its prefix again
        prefix = self._base[2] if self._base is not None else ""
        target = prefix + path
        if query:
            target += "?" + urlencode(list(query.items()))
        data = None if body is None else _ENCODER.encode(body)
        headers = await self.headers(content_type)
        return await self.pool.exchange(
            method, target, headers, data, timeout_s=timeout_s, deferrable=deferrable
        )

    async def send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None,
        body: Any,
        content_type: str,
        client_timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        data = None if body is None else _ENCODER.encode(body)
        return await self._session.request(
            method,
            self.url(path, query),
            headers=await self.headers(content_type),
            data=data,
            timeout=client_timeout,
            **self._extra,
        )


def _pool_for(host: str, session: aiohttp.ClientSession, server_hostname: Any) -> Http1Pool | None:
    """A pool for the server at ``host`` with the session's TLS context, or ``None`` when
    the URL or the session is not one it can stand beside."""
    try:
        url = URL(host)
    except ValueError:
        return None
    if url.scheme not in ("http", "https") or not url.host or url.user or url.password:
        return None
    if url.raw_query_string or url.raw_fragment:
        return None
    if getattr(session, "trust_env", True):
        return None  # a proxy variable may apply to the server: aiohttp's handling decides
    connector = getattr(session, "connector", None)
    if not isinstance(connector, aiohttp.TCPConnector):
        return None
    tls: ssl.SSLContext | None = None
    if url.scheme == "https":
        tls = getattr(connector, "_ssl", None)
        if not isinstance(tls, ssl.SSLContext):
            return None
    keepalive = getattr(connector, "_keepalive_timeout", None)
    return Http1Pool(
        url.host,
        url.explicit_port or url.port or (443 if tls else 80),
        authority=url.raw_authority,
        tls=tls,
        server_hostname=server_hostname if isinstance(server_hostname, str) else None,
        keepalive_s=float(keepalive) if isinstance(keepalive, int | float) else 60.0,
    )
