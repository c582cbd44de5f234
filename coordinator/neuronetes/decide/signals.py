"""Load signals from Prometheus text (the exposition format, parsed by prometheus_client).

A serving pod's ``/metrics`` in vLLM's names gives one :class:`PodSample`: requests waiting
(``vllm:num_requests_waiting``), the prompt length of past requests
(``vllm:request_prompt_tokens`` histogram ``_sum``/``_count``) and the token counters
(``vllm:prompt_tokens_total`` + ``vllm:generation_tokens_total``). :class:`RateTracker` turns
counters seen at two times into tokens per second. :func:`queue_depth` reads one gauge (a
ToolBinding's queue) from any exporter. Garbage raises :class:`SignalError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "GENERATION_TOKENS",
    "PROMPT_TOKENS",
    "REQUESTS_WAITING",
    "PodSample",
    "RateTracker",
    "SignalError",
    "parse_samples",
    "pod_sample",
    "queue_depth",
]

REQUESTS_WAITING: Final = "vllm:num_requests_waiting"
PROMPT_TOKENS: Final = "vllm:prompt_tokens_total"
GENERATION_TOKENS: Final = "vllm:generation_tokens_total"
REQUEST_PROMPT_TOKENS: Final = "vllm:request_prompt_tokens"


class SignalError(ValueError):
    """A metrics endpoint answered something that is not the signals we read."""


def parse_samples(text: str) -> dict[str, float]:
    """Sample name → value, summed over label sets (a server with several models)."""
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if math.isnan(sample.value):
                    continue
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise SignalError(f"not Prometheus text: {exc}") from None
    return out


@dataclass(frozen=True, slots=True)
class PodSample:
    waiting: float
    tokens_in_queue: float
    tokens_total: float | None  # prompt + generation tokens processed so far


def pod_sample(text: str, tokens_per_request: float) -> PodSample:
    samples = parse_samples(text)
    if REQUESTS_WAITING not in samples:
        raise SignalError(f"no {REQUESTS_WAITING} in the metrics")
    waiting = samples[REQUESTS_WAITING]
    count = samples.get(f"{REQUEST_PROMPT_TOKENS}_count", 0.0)
    per_request = (
        samples[f"{REQUEST_PROMPT_TOKENS}_sum"] / count
        if count > 0 and f"{REQUEST_PROMPT_TOKENS}_sum" in samples
        else tokens_per_request
    )
    counters = [samples[n] for n in (PROMPT_TOKENS, GENERATION_TOKENS) if n in samples]
    return PodSample(
        waiting=waiting,
        tokens_in_queue=waiting * per_request,
        tokens_total=sum(counters) if counters else None,
    )


def queue_depth(text: str, metric: str) -> float:
    samples = parse_samples(text)
    if metric not in samples:
        raise SignalError(f"no {metric} in the metrics")
    return samples[metric]


class RateTracker:
    """Per-pod counters at their last reading; :meth:`rate` is tokens/s since then (``None`` on
    the first reading or after a counter reset)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}

    def rate(self, pod_uid: str, now: float, total: float) -> float | None:
        before = self._last.get(pod_uid)
        self._last[pod_uid] = (now, total)
        if before is None or now <= before[0] or total < before[1]:
            return None
        return (total - before[1]) / (now - before[0])

    def forget_except(self, uids: set[str]) -> None:
        for uid in [u for u in self._last if u not in uids]:
            del self._last[uid]
