"""A coroutine run as a task for as long as a block lasts: the shape of the app's background work
(the leader election, the stale-agent sweep, the mismatch reporter, the config reload, the
DeviceTaintRule writer) in its ``cleanup_ctx``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


@contextlib.asynccontextmanager
async def in_background(
    work: Coroutine[Any, Any, object], *, name: str
) -> AsyncIterator[asyncio.Task[object]]:
    """Start ``work`` as a task named ``name``; on leaving, cancel it and wait until it ended."""
    task = asyncio.create_task(work, name=name)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


__all__ = ["in_background"]
