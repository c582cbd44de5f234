"""One attempt of the scheduling loop, driven by hand over the in-memory cluster."""

from __future__ import annotations

from coordinator.engine.loop import Scheduler
from tests.support.clock import ManualClock


async def attempt(scheduler: Scheduler, clock: ManualClock, name: str) -> None:
    """The loop's next attempt at ``default/<name>``, its backoff over: changes applied, the
    pod popped and tried, its writes done."""
    clock.now += 60.0
    scheduler.changes.apply()
    entry = scheduler.queue.pop()
    assert entry is not None
    assert entry.key == f"default/{name}"
    await scheduler.schedule(entry)
    await scheduler.drain()
