"""Client-side request rate limit: a token bucket, as client-go's ``QPS``/``Burst``.

Every request a ``KubeClient`` sends (watches included, once when they start) takes one token;
tokens come back at ``qps`` per second up to ``burst``. A request that finds none waits its turn:
like ``golang.org/x/time/rate`` (which client-go uses), a token may be *reserved* ahead of time,
so waiters are served in arrival order and never more than ``qps`` per second on average.

Requests that can wait (``wait(deferrable=True)``: Events, the ``PodScheduled`` explanations)
yield to every other: they reserve nothing ahead, queue among themselves in arrival order, and
take a token only when one is there. A bind therefore waits behind no Event however many are
queued (at most one token's time, for the deferrable request that took the last token), while the
client as a whole still sends no more than ``qps`` per second.

kube-scheduler's defaults are QPS 50 / burst 100 (``clientConnection`` in its configuration);
``RateLimit`` carries those two numbers, ``TokenBucket`` enforces them with an injectable clock::

    bucket = TokenBucket(RateLimit(qps=50, burst=100))
    await bucket.wait()          # immediate while tokens last, then 20 ms apart
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["RateLimit", "TokenBucket"]

_EPSILON = 1e-9


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimit:
    """``qps`` requests per second on average, ``burst`` at once after a quiet spell."""

    qps: float
    burst: int

    def __post_init__(self) -> None:
        if isinstance(self.qps, bool) or not isinstance(self.qps, int | float):
            raise ValueError(f"qps must be a number, not {self.qps!r}")
        if not math.isfinite(self.qps) or self.qps <= 0:
            raise ValueError(f"qps must be a positive number, not {self.qps!r}")
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 1:
            raise ValueError(f"burst must be an integer of at least 1, not {self.burst!r}")


class TokenBucket:
    """Enforces one ``RateLimit``. Event-loop only (not thread-safe)."""

    def __init__(
        self,
        limit: RateLimit,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.limit = limit
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(limit.burst)  # starts full, as client-go's does
        self._last = clock()
        self._deferred = asyncio.Lock()  # deferrable requests: one waits for a token at a time

    @property
    def tokens(self) -> float:
        """Tokens available now (negative: that many are reserved by waiting requests)."""
        self._refill()
        return self._tokens

    def _refill(self) -> None:
        now = self._clock()
        elapsed = now - self._last
        if elapsed > 0:
            self._tokens = min(float(self.limit.burst), self._tokens + elapsed * self.limit.qps)
            self._last = now

    def reserve(self) -> float:
        """Take a token now and return how many seconds to wait before using it (0: at once)."""
        self._refill()
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.limit.qps

    async def wait(self, *, deferrable: bool = False) -> None:
        """Take a token, sleeping until it is due; ``deferrable``: only once every request that
        is not deferrable has had its turn."""
        if deferrable:
            async with self._deferred:  # in arrival order (asyncio.Lock is fair)
                while True:
                    self._refill()
                    if self._tokens >= 1.0 - _EPSILON:  # a rounding error must not spin
                        self._tokens -= 1.0
                        return
                    await self._sleep((1.0 - self._tokens) / self.limit.qps)
        delay = self.reserve()
        if delay > 0:
            try:
                await self._sleep(delay)
            except asyncio.CancelledError:
                self._tokens += 1.0  # the request is not sent: its token goes back
                raise
