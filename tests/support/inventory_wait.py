"""Waiting for the coordinator's in-memory inventory, driven by its change events."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from coordinator.inventory.store import Inventory


async def until(inv: Inventory, predicate: Callable[[], bool], *, timeout_s: float = 60.0) -> None:
    """Return once ``predicate()`` holds, re-checking on every inventory change.

    The timeout only guards a hang; it is generous so a loaded machine does not fail the test.
    """
    changed = asyncio.Event()
    unsubscribe = inv.subscribe(lambda event: changed.set())
    try:
        async with asyncio.timeout(timeout_s):
            while not predicate():
                await changed.wait()
                changed.clear()
    except TimeoutError:
        raise AssertionError(f"the inventory never got there in {timeout_s:.0f} s") from None
    finally:
        unsubscribe()
