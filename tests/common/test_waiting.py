"""``wait_set``: an event set, a time limit passed, and — what ``asyncio.wait_for`` loses before
Python 3.12 — a cancel arriving in the same turn as the event is set stops the waiting task."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from common.waiting import wait_set


def _set_and_cancel_together(wait: Callable[[asyncio.Event], Awaitable[object]]) -> str:
    """What happened to a task waiting through ``wait`` when its event is set and the task is
    cancelled in one turn of the loop (as a runtime stops while a watch event arrives)."""

    async def main() -> str:
        event = asyncio.Event()
        task = asyncio.create_task(wait(event))
        await asyncio.sleep(0)  # the task is waiting now
        event.set()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "returned"

    return asyncio.run(main())


def test_a_cancel_as_the_event_is_set_is_not_lost() -> None:
    # (asyncio.wait_for returns "returned" here on Python 3.11)
    assert _set_and_cancel_together(lambda e: wait_set(e, 30)) == "cancelled"


def test_the_event_set_or_the_time_limit_is_told_apart() -> None:
    async def main() -> tuple[bool, bool, float]:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        began = loop.time()
        timed_out = await wait_set(event, 0.05)
        waited = loop.time() - began
        loop.call_later(0.01, event.set)
        return timed_out, await wait_set(event, None), waited

    timed_out, set_, waited = asyncio.run(main())
    assert timed_out is False
    assert set_ is True
    assert waited >= 0.05
