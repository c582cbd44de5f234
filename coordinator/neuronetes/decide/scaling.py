"""Token- and queue-aware scaling: the NeuroNetes guide's formulas, as pure functions.

With ``q`` the tokens waiting in the pool's queues, ``r`` the throughput of one replica (tokens
per second) and ``n`` the replicas:

- ``expected_ttft = q / (r × n) + model_load_time`` (the guide's ``tokens_in_queue /
  tokens_per_second``, the pool's throughput being ``r × n``);
- when ``expected_ttft > slo.ttft``: scale up to ``ceil(q / (r × slo.ttft))``, at most
  ``maxReplicas`` (never below ``n``);
- when ``q < r × n × 0.5`` (less than half a second of work) and nothing asked for more since the
  last scale for ``cooldown`` seconds: one replica fewer, never below ``minReplicas``;
- a ToolBinding's ``lag = queue_depth − n × prefetch × throughput``; above ``maxLagThreshold``
  the pool goes up to the replicas that bring the lag under it,
  ``ceil((queue_depth − maxLagThreshold) / (prefetch × throughput))``; a pool scales down only
  when one replica fewer would keep every binding's lag under its threshold.

:func:`decide` combines them; the largest ask wins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Decision",
    "LagSignal",
    "ScaleMemory",
    "TokenSignals",
    "decide",
    "expected_ttft",
    "format_seconds",
    "lag_of",
]


@dataclass(frozen=True, slots=True)
class TokenSignals:
    tokens_in_queue: float
    tokens_per_second: float  # one replica's


@dataclass(frozen=True, slots=True)
class LagSignal:
    binding: str
    queue_depth: float
    prefetch: float
    throughput: float
    max_lag: float


@dataclass(slots=True)
class ScaleMemory:
    """What the autoscaler remembers of a pool between decisions (monotonic seconds)."""

    last_scale: float | None = None
    last_busy: float | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    desired: int
    reason: str
    expected_ttft_s: float | None = None

    def direction(self, current: int) -> str | None:
        if self.desired > current:
            return "up"
        return "down" if self.desired < current else None


def expected_ttft(
    tokens_in_queue: float, per_replica: float, replicas: int, load_s: float
) -> float:
    pool = per_replica * replicas
    if tokens_in_queue <= 0:
        return load_s
    return math.inf if pool <= 0 else tokens_in_queue / pool + load_s


def lag_of(signal: LagSignal, replicas: int) -> float:
    return signal.queue_depth - replicas * signal.prefetch * signal.throughput


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if math.isinf(seconds):
        return "inf"
    return f"{seconds * 1000:.0f}ms" if seconds < 10 else f"{seconds:.1f}s"


def _lag_target(signal: LagSignal, current: int) -> int:
    per = signal.prefetch * signal.throughput
    if per <= 0:
        return current + 1
    return max(current + 1, math.ceil((signal.queue_depth - signal.max_lag) / per))


def decide(
    current: int,
    *,
    low: int,
    high: int,
    tokens: TokenSignals | None,
    lags: Sequence[LagSignal] = (),
    slo_s: float | None = None,
    load_s: float = 0.0,
    cooldown_s: float = 60.0,
    memory: ScaleMemory,
    now: float,
    tokens_expected: bool = True,
) -> Decision:
    """The replicas to run. ``tokens`` None with ``tokens_expected``: the signals are missing and
    the pool keeps its replicas (the ToolBindings may still scale it up)."""
    if current < low:
        memory.last_scale = now
        return Decision(low, f"below minReplicas {low}")
    ttft = None
    asks: list[tuple[int, str]] = []
    if tokens is not None and slo_s is not None:
        ttft = expected_ttft(tokens.tokens_in_queue, tokens.tokens_per_second, current, load_s)
        if ttft > slo_s and tokens.tokens_per_second > 0:
            wanted = math.ceil(tokens.tokens_in_queue / (tokens.tokens_per_second * slo_s))
            asks.append(
                (
                    wanted,
                    f"expected TTFT {format_seconds(ttft)} > SLO {format_seconds(slo_s)}: "
                    f"{tokens.tokens_in_queue:.0f} tokens queued at "
                    f"{tokens.tokens_per_second:.0f} tokens/s per replica",
                )
            )
    for signal in lags:
        lag = lag_of(signal, current)
        if lag > signal.max_lag:
            asks.append(
                (
                    _lag_target(signal, current),
                    f"ToolBinding {signal.binding}: lag {lag:.0f} > maxLagThreshold "
                    f"{signal.max_lag:.0f}",
                )
            )
    ups = [(min(n, high), why) for n, why in asks if min(n, high) > current]
    if ups:
        wanted, why = max(ups)
        memory.last_scale = memory.last_busy = now
        return Decision(wanted, why, ttft)
    if current > high:
        memory.last_scale = now
        return Decision(high, f"above maxReplicas {high}", ttft)
    idle_tokens = (
        not tokens_expected
        if tokens is None
        else tokens.tokens_in_queue < tokens.tokens_per_second * current * 0.5
    )
    idle_queues = all(lag_of(s, current - 1) <= s.max_lag for s in lags)
    if asks or not (idle_tokens and idle_queues):
        memory.last_busy = now
        return Decision(current, "load within the SLO" if tokens else "holding", ttft)
    since = max((t for t in (memory.last_scale, memory.last_busy) if t is not None), default=None)
    if current > low and (since is None or now - since >= cooldown_s):
        memory.last_scale = now
        queued = f"{tokens.tokens_in_queue:.0f} tokens queued" if tokens else "queues drained"
        return Decision(
            current - 1, f"{queued}: under half a second of work for {cooldown_s:g}s", ttft
        )
    return Decision(current, "idle, cooling down" if current > low else "at minReplicas", ttft)
