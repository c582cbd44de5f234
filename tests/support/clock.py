"""A clock the test moves by hand (``clock.now += 31``): staleness, backoff and timeouts
without waiting. Pass it wherever the code under test takes a ``clock: Callable[[], float]``."""

from __future__ import annotations

import asyncio


class ManualClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class SleepingClock(ManualClock):
    """A :class:`ManualClock` with the ``sleep`` to pass beside it: a sleep returns once
    :meth:`advance` has moved the clock past its deadline."""

    def __init__(self, now: float = 0.0) -> None:
        super().__init__(now)
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    async def sleep(self, seconds: float) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, done))
        await done

    async def advance(self, seconds: float) -> None:
        """Moves the clock, wakes the sleepers it passed, and lets them run."""
        self.now += seconds
        for deadline, done in list(self._sleepers):
            if deadline <= self.now:
                self._sleepers.remove((deadline, done))
                done.set_result(None)
        for _ in range(5):
            await asyncio.sleep(0)
