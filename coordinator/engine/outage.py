"""The API server not answering binds: one pause for the whole loop, not a retry per pod.

A bind that got no answer at all (:class:`~.ports.NoAnswer`: connection refused or reset, a
timeout) says nothing about the pod; every other pod's bind would fail the same way. Each pod
still goes back to the queue with its own backoff, as in kube-scheduler, but with hundreds
waiting that alone means an attempt (filter and score every node) every few tens of
milliseconds for as long as the server is gone. So the loop also waits before its next cycle: 1 s
after the first such failure, doubling per failed window up to ``MAX_WAIT_S``. The first bind
after a wait is the probe; the first that succeeds ends the outage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_WAIT_S", "Outage"]

INITIAL_WAIT_S: Final = 1.0
MAX_WAIT_S: Final = 10.0  # kube-scheduler's podMaxBackoffSeconds


@dataclass
class Outage:
    wait_s: float = 0.0  # the current pause (0: the API server answers)
    until: float = 0.0  # no cycle before this (the scheduler's clock)
    failures: int = 0  # binds that found no API server, this outage

    @property
    def ongoing(self) -> bool:
        return self.wait_s > 0

    def failed(self, now: float) -> float | None:
        """A bind found no API server at ``now``: the new pause in seconds, or ``None`` if one
        already runs (binds in flight when the server went fail together: one doubling)."""
        self.failures += 1
        if now < self.until:
            return None
        self.wait_s = min(MAX_WAIT_S, max(INITIAL_WAIT_S, self.wait_s * 2))
        self.until = now + self.wait_s
        return self.wait_s

    def answered(self) -> int:
        """A bind succeeded: the outage is over. Returns the binds it failed (0: there was
        none)."""
        failures = self.failures
        self.wait_s, self.until, self.failures = 0.0, 0.0, 0
        return failures

    def left_s(self, now: float) -> float:
        """Seconds until the next cycle may start."""
        return max(0.0, self.until - now)
