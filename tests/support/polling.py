"""Waiting for in-process state that has no change event to subscribe to (metrics, counters,
flags): check, yield to the loop briefly, check again — bounded by a generous timeout that only
guards a hang. Prefer an event or a watch where the code under test offers one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 120.0


async def eventually(
    check: Callable[[], T | Awaitable[T | None] | None],
    *,
    what: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval_s: float = 0.05,
) -> T:
    """The first truthy value of ``check()`` (a function or a coroutine function)."""
    last: T | None = None
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                result = check()
                last = await result if isinstance(result, Awaitable) else result
                if last:
                    return last
                await asyncio.sleep(interval_s)
    except TimeoutError:
        raise AssertionError(
            f"gave up after {timeout_s:.0f} s waiting for {what}; last: {last!r}"
        ) from None
