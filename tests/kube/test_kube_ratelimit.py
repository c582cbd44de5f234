"""Client-side rate limit (``common.kube.ratelimit``) on a fake clock, and the coordinator's
``kube`` config section that sets it.

No time passes in these tests: the clock is a number the test moves, and ``sleep`` records the
delays the bucket asked for instead of waiting.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from common.kube import ClientSettings, KubeClient, RateLimit, TokenBucket
from coordinator.app.config.load import ConfigError, parse_config
from coordinator.app.config.sections import KubeSection


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def bucket(qps: float, burst: int) -> tuple[TokenBucket, FakeClock]:
    clock = FakeClock()
    return TokenBucket(RateLimit(qps=qps, burst=burst), clock=clock, sleep=clock.sleep), clock


def test_a_full_bucket_lets_burst_requests_through_then_spaces_them_at_qps() -> None:
    tb, _ = bucket(50, 100)
    assert [tb.reserve() for _ in range(100)] == [0.0] * 100
    # the 101st waits one token's time (20 ms), the 102nd two, ...: 50 per second
    assert [tb.reserve() for _ in range(3)] == pytest.approx([0.02, 0.04, 0.06])


def test_tokens_come_back_at_qps_up_to_burst_only() -> None:
    tb, clock = bucket(10, 5)
    for _ in range(5):
        assert tb.reserve() == 0.0
    clock.now += 0.3  # three tokens back
    assert [tb.reserve() for _ in range(4)] == pytest.approx([0.0, 0.0, 0.0, 0.1])
    clock.now += 3600  # a long quiet spell refills to burst, not beyond
    assert tb.tokens == pytest.approx(5.0)


async def test_waiters_are_served_in_order_at_the_average_rate() -> None:
    tb, clock = bucket(4, 2)
    start = clock.now
    for _ in range(10):
        await tb.wait()
    # two at once, then eight more at 4/s: the tenth goes out 2 s after the first
    assert clock.now - start == pytest.approx(2.0)
    assert len(clock.slept) == 8


async def test_a_cancelled_waiter_gives_its_token_back() -> None:
    never = asyncio.Event()

    async def blocked_sleep(seconds: float) -> None:
        await never.wait()

    tb = TokenBucket(RateLimit(qps=1, burst=1), clock=lambda: 0.0, sleep=blocked_sleep)
    await tb.wait()
    assert tb.tokens == pytest.approx(0.0)
    task = asyncio.create_task(tb.wait())
    await asyncio.sleep(0)
    assert tb.tokens == pytest.approx(-1.0)  # reserved by the waiter
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tb.tokens == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("qps", "burst"),
    [(0, 10), (-5, 10), (float("inf"), 10), (float("nan"), 1), (10, 0), (10, 2.5), (True, 1)],
)
def test_bad_limits_are_refused(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match=r"qps|burst"):
        RateLimit(qps=qps, burst=burst)


def _kube(raw: object) -> KubeSection:
    return parse_config({"kube": raw}, source="F").kube


def test_kube_section_defaults_to_kube_schedulers_limit() -> None:
    assert _kube(None).rate_limit == RateLimit(qps=50, burst=100)
    assert _kube({"qps": 200}).rate_limit == RateLimit(qps=200, burst=100)
    assert _kube({"qps": 5000, "burst": 10000}).client_settings() == (
        ClientSettings(rate_limit=RateLimit(qps=5000, burst=10000))
    )


def test_kube_section_qps_zero_means_no_client_side_limit() -> None:
    section = _kube({"qps": 0})
    assert section.rate_limit is None
    client = KubeClient(object(), settings=section.client_settings())
    assert client._bucket is None  # nothing on the request path


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"qps": -1}, "'kube.qps' in F: expected a number >= 0"),
        ({"qps": "fast"}, "'kube.qps' in F: expected a number, got a string"),
        ({"burst": 0}, "'kube.burst' in F: expected an integer >= 1"),
        ({"burst": "lots"}, "'kube.burst' in F: expected an integer, got a string"),
        ({"qpz": 10}, "unknown key 'kube.qpz' in F — did you mean 'kube.qps'?"),
        (["qps", 10], "'kube' in F: expected a mapping, got a list"),
    ],
)
def test_kube_section_rejects_bad_values_with_their_name(raw: object, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        _kube(raw)


class SleepingClock(FakeClock):
    """Sleepers wake in the order of their wake-up times as :meth:`run` moves the clock."""

    def __init__(self) -> None:
        super().__init__()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []

    async def sleep(self, seconds: float) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, len(self._sleepers), woken))
        await woken

    async def run(self, *tasks: asyncio.Task[None]) -> None:
        while not all(t.done() for t in tasks):
            for _ in range(5):
                await asyncio.sleep(0)  # everything runnable runs first
            if self._sleepers:
                self._sleepers.sort(key=lambda s: s[:2])
                when, _, woken = self._sleepers.pop(0)
                self.now = max(self.now, when)
                woken.set_result(None)


async def test_deferrable_requests_yield_to_the_others_and_keep_their_own_order() -> None:
    clock = SleepingClock()
    tb = TokenBucket(RateLimit(qps=10, burst=1), clock=clock, sleep=clock.sleep)
    order: list[str] = []

    async def request(name: str, *, deferrable: bool) -> None:
        await tb.wait(deferrable=deferrable)
        order.append(name)

    await tb.wait()  # the burst is spent
    events = [asyncio.create_task(request(f"event-{k}", deferrable=True)) for k in range(3)]
    await asyncio.sleep(0)  # the Events are waiting for a token
    binds = [asyncio.create_task(request(f"bind-{k}", deferrable=False)) for k in range(2)]
    start = clock.now
    await clock.run(*events, *binds)
    assert order == ["bind-0", "bind-1", "event-0", "event-1", "event-2"]
    assert clock.now - start == pytest.approx(0.5)  # still 10 per second in all
