"""Waiting for an :class:`asyncio.Event` with a time limit, without losing a cancel.

``asyncio.wait_for(event.wait(), timeout)`` before Python 3.12 returns normally when the event is
set in the same turn of the loop as its task is cancelled (CPython gh-86296): the cancel is lost,
and a loop around it — a scheduler's, a ticker's — never stops. :func:`wait_set` uses
:func:`asyncio.timeout`, which tells its own timeout from a cancel from outside.
"""

from __future__ import annotations

import asyncio

__all__ = ["wait_set"]


async def wait_set(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until ``event`` is set (``True``) or ``timeout_s`` seconds passed (``False``; ``None``:
    no limit)."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True
