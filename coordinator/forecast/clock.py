"""A simulated clock for the production engine: an asyncio event loop whose time is virtual.

``loop.time()`` starts at 0 and moves only when every task is waiting: instead of blocking in
``select`` for the time left until the next timer (``asyncio.sleep``, ``call_later``,
``wait_for``'s and ``asyncio.timeout``'s deadlines), the loop jumps to that timer at once. Work
that is ready always runs first, in the order asyncio runs it, so the engine's own code (its
queue, backoff, gang timeouts, nominations, binder) behaves as it does on the real clock — only
the waiting between events takes no wall time. Nothing in the engine knows: its components take
a ``clock`` (``time.monotonic`` by default, :meth:`SimulatedLoop.time` here) and schedule their
waits on the running loop, so production pays nothing for this.

    loop = SimulatedLoop()
    try:
        result = loop.run_until_complete(main())   # inside main: asyncio.get_running_loop().time()
    finally:
        loop.close()

File descriptors still work (the loop polls them without waiting before each jump), but a jump
never waits for a thread: code run with ``asyncio.to_thread`` would see simulated time race
ahead. The engine does none on this path. A loop with nothing ready, no timer and no descriptor
event is stalled for good (nothing can ever wake it): :class:`SimulationStalled` is raised.
"""

from __future__ import annotations

import asyncio
import math
import selectors
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["EPOCH", "SimulatedLoop", "SimulationStalled"]

#: The wall-clock time (Unix seconds) simulated time 0 stands for in timestamps the engine writes
#: (Events, conditions, attempts): 2026-01-01T00:00:00Z.
EPOCH: Final = 1_767_225_600.0


class SimulationStalled(RuntimeError):
    """Nothing is ready, nothing is scheduled: simulated time can never move again."""


class _JumpingSelector(selectors.BaseSelector):
    """A real selector, polled without waiting; a wait for ``timeout`` becomes a jump."""

    def __init__(self, loop: SimulatedLoop) -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if ready or self._loop.busy():
            return ready
        if timeout is None:
            raise SimulationStalled(
                f"simulated time {self._loop.time():.3f}s: no task is ready and no timer is set"
            )
        self._loop.advance(timeout)
        return []

    def close(self) -> None:
        self._real.close()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._real.get_map()


class SimulatedLoop(asyncio.SelectorEventLoop):
    """An event loop on simulated time (seconds from ``start``)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self.jumps = 0  # how often time moved (each time every task was waiting)
        super().__init__(_JumpingSelector(self))
        # A timer fires once time has reached it, never early: asyncio's default resolution
        # would run a timer due a nanosecond from now at once, and an engine that then finds
        # its deadline not yet passed (``backoff_until <= clock()``) would set the same timer
        # again, forever, with time standing still.
        self._clock_resolution = 0.0

    def busy(self) -> bool:
        """Callbacks are ready to run (time must not move)."""
        return bool(self._ready)  # type: ignore[attr-defined]  # BaseEventLoop's own deque

    def time(self) -> float:
        return self._now

    def wall(self) -> float:
        """Unix time standing for now (:data:`EPOCH` + simulated seconds)."""
        return EPOCH + self._now

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds``, and at least past now: a timer due now fires only once
        time is past it (asyncio runs timers whose time is before the loop's)."""
        self._now = max(self._now + seconds, math.nextafter(self._now, math.inf))
        self.jumps += 1
