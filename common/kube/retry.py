"""The one retry policy for Kubernetes API calls.

A call is retried when the server says it did not process it (429, 503) whatever the verb, and
on other transient failures (500, 502, 504, no response at all) only for verbs that are safe to
repeat (GET, PUT, DELETE). Waits grow exponentially with jitter, honouring ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from common.kube.errors import KubeError, ServerError, TooManyRequests, Unreachable

T = TypeVar("T")

_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})
_NOT_PROCESSED = frozenset({429, 503})


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often and how patiently to retry."""

    attempts: int = 5
    """Total tries, the first included; 1 disables retrying."""
    initial_delay_s: float = 0.1
    """Wait after the first failure; doubles each time."""
    max_delay_s: float = 5.0
    """Cap on any one wait (also on a server's Retry-After)."""

    def should_retry(self, method: str, error: KubeError, attempt: int) -> bool:
        """Whether try number ``attempt`` (1-based) that failed with ``error`` gets another go."""
        if attempt >= self.attempts:
            return False
        if isinstance(error, TooManyRequests | ServerError) and error.status in _NOT_PROCESSED:
            return True
        if method.upper() not in _IDEMPOTENT:
            return False
        return isinstance(error, Unreachable | ServerError)

    def delay_s(self, error: KubeError, attempt: int, *, jitter: float | None = None) -> float:
        """Seconds to wait before try ``attempt + 1``."""
        if error.retry_after_s is not None:
            return min(max(error.retry_after_s, 0.0), self.max_delay_s)
        base = min(self.initial_delay_s * 2.0 ** (attempt - 1), self.max_delay_s)
        fraction: float = random.random() if jitter is None else jitter
        return float(base * (0.5 + fraction / 2))


NO_RETRY = RetryPolicy(attempts=1)


async def call_with_retries(
    policy: RetryPolicy, method: str, call: Callable[[], Awaitable[T]]
) -> T:
    attempt = 1
    while True:
        try:
            return await call()
        except KubeError as error:
            if not policy.should_retry(method, error, attempt):
                raise
            await asyncio.sleep(policy.delay_s(error, attempt))
            attempt += 1
