"""A clock the test moves by hand (``clock.now += 31``): staleness, backoff and timeouts
without waiting. Pass it wherever the code under test takes a ``clock: Callable[[], float]``."""

from __future__ import annotations


class ManualClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
