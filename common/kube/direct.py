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
- the body encoded by msgspec (compact UTF-8 JSON) instead of ``json.dumps``.

The reply is the raw ``aiohttp.ClientResponse``, as ``call_api(_preload_content=False)`` returns;
status handling and error mapping stay in ``KubeClient._send``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self
from urllib.parse import urlencode

import aiohttp
import msgspec

__all__ = ["DirectTransport"]

_ENCODER = msgspec.json.Encoder()


class DirectTransport:
    """Requests on an ``ApiClient``'s session; build with :meth:`of`."""

    __slots__ = ("_api", "_configuration", "_extra", "_session")

    def __init__(self, api_client: Any, session: aiohttp.ClientSession) -> None:
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

    @classmethod
    def of(cls, api_client: Any) -> Self | None:
        """A transport over ``api_client``'s session, or ``None`` when it has none we know."""
        rest = getattr(api_client, "rest_client", None)
        session = getattr(rest, "pool_manager", None)
        if not isinstance(session, aiohttp.ClientSession):
            return None
        if getattr(api_client, "configuration", None) is None:
            return None
        return cls(api_client, session)

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
        url = self._configuration.host + path
        if query:
            url = f"{url}?{urlencode(list(query.items()))}"
        data = None if body is None else _ENCODER.encode(body)
        return await self._session.request(
            method,
            url,
            headers=await self.headers(content_type),
            data=data,
            timeout=client_timeout,
            **self._extra,
        )
