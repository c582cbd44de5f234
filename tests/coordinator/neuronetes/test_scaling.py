"""The guide's token and queue formulas, and the signals read from Prometheus text (pure)."""

from __future__ import annotations

import pytest

from coordinator.neuronetes.decide.scaling import (
    LagSignal,
    ScaleMemory,
    TokenSignals,
    decide,
    expected_ttft,
    lag_of,
)
from coordinator.neuronetes.decide.signals import RateTracker, SignalError, pod_sample, queue_depth

VLLM = """\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 3.0
vllm:num_requests_waiting{model_name="b"} 1.0
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{model_name="a",le="+Inf"} 4.0
vllm:request_prompt_tokens_count{model_name="a"} 4.0
vllm:request_prompt_tokens_sum{model_name="a"} 2000.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="a"} 1500.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="a"} 500.0
"""


def test_vllm_metrics_give_tokens_in_queue_and_the_counters() -> None:
    sample = pod_sample(VLLM, tokens_per_request=1.0)
    assert sample.waiting == 4
    assert sample.tokens_in_queue == 4 * 500  # mean prompt of past requests
    assert sample.tokens_total == 2000


@pytest.mark.parametrize(
    "text", ["<html>oops</html>\n{{{", "# TYPE x gauge\nx 1\n", "vllm:num_requests_waiting abc\n"]
)
def test_garbage_is_a_signal_error(text: str) -> None:
    with pytest.raises(SignalError):
        pod_sample(text, 256)


def test_queue_depth_and_counter_rates() -> None:
    assert (
        queue_depth(
            'rabbitmq_queue_messages_ready{queue="q"} 42\n', "rabbitmq_queue_messages_ready"
        )
        == 42
    )
    rates = RateTracker()
    assert rates.rate("p", 10.0, 100.0) is None
    assert rates.rate("p", 12.0, 2100.0) == 1000.0
    assert rates.rate("p", 13.0, 5.0) is None  # a restarted server's counters


def test_expected_ttft_is_queue_over_throughput_plus_load() -> None:
    assert expected_ttft(3000, 500, 2, 1.5) == pytest.approx(4.5)


def _decide(
    current: int, tokens: TokenSignals | None, memory: ScaleMemory, now: float, **kw: object
):  # type: ignore[no-untyped-def]
    args = {"low": 1, "high": 8, "slo_s": 1.0, "cooldown_s": 30.0}
    args.update(kw)
    return decide(current, tokens=tokens, memory=memory, now=now, **args)  # type: ignore[arg-type]


def test_scale_up_to_the_guide_formula_bounded_by_max() -> None:
    memory = ScaleMemory()
    up = _decide(1, TokenSignals(5000, 1000), memory, 0.0)
    assert up.desired == 5  # ceil(5000 / (1000 x 1))
    assert up.expected_ttft_s == pytest.approx(5.0)
    assert _decide(1, TokenSignals(50000, 1000), ScaleMemory(), 0.0).desired == 8


def test_scale_down_one_at_a_time_after_the_cooldown() -> None:
    memory = ScaleMemory()
    _decide(1, TokenSignals(5000, 1000), memory, 0.0)
    idle = TokenSignals(100, 1000)  # under half a second of work for 5 replicas
    assert _decide(5, idle, memory, 10.0).desired == 5  # cooling down
    assert _decide(5, idle, memory, 31.0).desired == 4
    assert _decide(4, idle, memory, 40.0).desired == 4
    assert _decide(4, idle, memory, 62.0).desired == 3
    assert _decide(1, idle, memory, 500.0).desired == 1  # minReplicas


def test_missing_signals_keep_the_replicas() -> None:
    assert _decide(3, None, ScaleMemory(), 1000.0).desired == 3


def test_toolbinding_lag_scales_up_and_holds_while_needed() -> None:
    signal = LagSignal("q", queue_depth=500, prefetch=10, throughput=2, max_lag=100)
    assert lag_of(signal, 2) == 460
    up = _decide(2, None, ScaleMemory(), 0.0, lags=(signal,), tokens_expected=False)
    assert up.desired == 8  # ceil((500 - 100) / 20) = 20, at most maxReplicas
    assert up.reason == "ToolBinding q: lag 460 > maxLagThreshold 100"
    low = LagSignal("q", queue_depth=150, prefetch=10, throughput=2, max_lag=100)
    # with 3 replicas the lag is 90; with 2 it would be 110: stay
    assert _decide(3, None, ScaleMemory(), 99.0, lags=(low,), tokens_expected=False).desired == 3
