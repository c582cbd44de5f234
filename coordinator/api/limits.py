"""Limits on the HTTP API: request body size and a per-client request rate.

``limits_middleware(settings)`` is installed *before* authentication so a flood (or a stream of
garbage tokens) is turned away without costing a TokenReview:

* **Body size.** A declared ``Content-Length`` over ``max_body_bytes`` is refused with 413 before a
  byte is read, and the connection ends with the answer; a chunked body is held to the same
  bound while the handler reads it.
* **Rate.** Each client (its remote address) owns a token bucket of ``burst`` tokens refilled at
  ``rate_per_s``; a request takes one token, and a client with none gets 429 with
  ``Retry-After``. Other clients are unaffected: their buckets are their own. The table of buckets
  is bounded (least recently seen clients are forgotten first, which only ever *refills* them).
  Probes (``/healthz``, ``/readyz``) are exempt so the kubelet never restarts a busy coordinator.

Time is an injected monotonic ``clock`` so refill is tested without sleeping.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import msgspec
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from coordinator.api.errors import error_response


class LimitSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The config file's ``limits`` section."""

    max_body_bytes: int = msgspec.field(default=4 * 1024 * 1024, name="maxBodyBytes")
    """Largest request body accepted (``POST /v1/simulate`` carries pod specs)."""
    rate_per_s: float = msgspec.field(default=50.0, name="ratePerSecond")
    """Sustained requests per second per client."""
    burst: int = 100
    """Requests a client may make at once before the rate applies."""
    max_clients: int = msgspec.field(default=10_000, name="maxClients")
    """Most clients tracked at once."""

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1:
            raise ValueError("limits.maxBodyBytes must be positive")
        if not (self.rate_per_s > 0 and math.isfinite(self.rate_per_s)):
            raise ValueError("limits.ratePerSecond must be a positive number")
        if self.burst < 1 or self.max_clients < 1:
            raise ValueError("limits.burst and limits.maxClients must be positive")


EXEMPT_PATHS: Final = frozenset({"/healthz", "/readyz"})
"""Paths never rate limited (the kubelet's probes)."""


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """Token buckets keyed by client."""

    def __init__(
        self, settings: LimitSettings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self.refused = 0

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, client: str) -> float:
        """Spend one token of ``client``: 0.0 if allowed, else seconds until one is available."""
        s = self._settings
        now = self._clock()
        bucket = self._buckets.get(client)
        if bucket is None:
            bucket = _Bucket(tokens=float(s.burst), updated=now)
            self._buckets[client] = bucket
            while len(self._buckets) > s.max_clients:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(client)
            elapsed = max(0.0, now - bucket.updated)
            bucket.tokens = min(float(s.burst), bucket.tokens + elapsed * s.rate_per_s)
            bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        self.refused += 1
        return (1.0 - bucket.tokens) / s.rate_per_s


def client_key(request: web.Request) -> str:
    """Who is asking: the peer's address (the API server's, for requests through its proxy)."""
    return request.remote or "unknown"


def limits_middleware(
    settings: LimitSettings,
    *,
    limiter: RateLimiter | None = None,
    key: Callable[[web.Request], str] = client_key,
) -> Middleware:
    """The middleware; pass ``limiter`` to share or inspect the buckets."""
    buckets = limiter if limiter is not None else RateLimiter(settings)

    @web.middleware
    async def limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in EXEMPT_PATHS:
            wait = buckets.take(key(request))
            if wait > 0:
                response = error_response(
                    request, 429, "too-many-requests", "rate limit exceeded; slow down"
                )
                response.headers["Retry-After"] = str(max(1, math.ceil(wait)))
                return response
        declared = request.content_length
        if declared is not None and declared > settings.max_body_bytes:
            response = error_response(
                request,
                413,
                "payload-too-large",
                f"request body of {declared} bytes exceeds the limit of "
                f"{settings.max_body_bytes} bytes",
            )
            return await _answer_and_end(request, response)
        if request.can_read_body and request.client_max_size != settings.max_body_bytes:
            request = request.clone(client_max_size=settings.max_body_bytes)
        return await handler(request)

    return limit


async def _answer_and_end(request: web.Request, response: web.Response) -> web.Response:
    """Send ``response`` now and end the connection: the body it refuses is never read.

    Left to aiohttp, the unread body would keep the connection open for its lingering time (10 s)
    after the answer, so a client waiting for the end of the reply would wait that long. Instead
    the answer says ``Connection: close`` and our side of the connection is shut at once (TLS has
    no half-close: there the connection is closed)."""
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    transport = request.transport
    if transport is not None and transport.can_write_eof():
        transport.write_eof()  # the client sees the end; what it still sends is drained
    else:
        request.protocol.force_close()
    return response
