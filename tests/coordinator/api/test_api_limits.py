"""Limits on the coordinator's HTTP API: a flooding client is throttled (429 + Retry-After) while
other clients keep being served; oversized bodies are refused (413) whether declared or chunked.

The servers run on 127.0.0.1; clients are told apart by binding to other loopback addresses
(127.0.0.2, 127.0.0.3). Every flood is a bounded number of requests. The buckets' clock is frozen,
so how many requests pass is exact, not a matter of timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from coordinator.api.limits import LimitSettings, RateLimiter, limits_middleware
from tests.support.clock import ManualClock


def test_bucket_allows_a_burst_then_refills_at_the_rate() -> None:
    clock = ManualClock(50.0)
    limiter = RateLimiter(LimitSettings(rate_per_s=2, burst=3), clock=clock)
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(0.5)
    clock.now += 0.5
    assert limiter.take("a") == 0.0
    assert limiter.take("b") == 0.0  # another client has its own bucket
    clock.now += 100  # refill is capped at the burst
    assert [limiter.take("a") for _ in range(4)].count(0.0) == 3


def test_client_table_is_bounded() -> None:
    limiter = RateLimiter(LimitSettings(max_clients=5), clock=ManualClock(50.0))
    for i in range(50):
        limiter.take(f"10.0.0.{i}")
    assert len(limiter) == 5


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response({"bytes": len(body)})


@pytest.fixture
async def server() -> AsyncIterator[tuple[TestServer, RateLimiter]]:
    settings = LimitSettings(rate_per_s=1, burst=10, max_body_bytes=1024)
    limiter = RateLimiter(settings, clock=ManualClock(50.0))
    app = web.Application(middlewares=[limits_middleware(settings, limiter=limiter)])
    app.router.add_get("/v1/nodes", _echo)
    app.router.add_post("/v1/simulate", _echo)
    app.router.add_get("/healthz", _echo)
    srv = TestServer(app, host="127.0.0.1")
    await srv.start_server()
    yield srv, limiter
    await srv.close()


def _client(source: str) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(source, 0)))


async def test_a_flood_from_one_client_does_not_starve_another(
    server: tuple[TestServer, RateLimiter],
) -> None:
    srv, limiter = server
    url = str(srv.make_url("/v1/nodes"))

    async def one(session: aiohttp.ClientSession) -> tuple[int, str | None]:
        async with session.get(url) as resp:
            await resp.read()
            return resp.status, resp.headers.get("Retry-After")

    async with _client("127.0.0.2") as flooder, _client("127.0.0.3") as polite:
        flood = [asyncio.create_task(one(flooder)) for _ in range(60)]
        polite_results = [await one(polite) for _ in range(8)]
        flood_results = await asyncio.gather(*flood)
        probe_during_flood = await flooder.get(str(srv.make_url("/healthz")))
        assert probe_during_flood.status == 200  # probes are exempt

    statuses = [status for status, _ in flood_results]
    assert statuses.count(200) == 10  # exactly the burst
    assert statuses.count(429) == 50
    assert all(retry == "1" for status, retry in flood_results if status == 429)
    assert [status for status, _ in polite_results] == [200] * 8
    assert limiter.refused == 50


async def test_throttled_reply_is_a_json_error(server: tuple[TestServer, RateLimiter]) -> None:
    srv, _ = server
    async with _client("127.0.0.4") as session:
        for _ in range(10):
            async with session.get(str(srv.make_url("/v1/nodes"))) as resp:
                assert resp.status == 200
        async with session.get(str(srv.make_url("/v1/nodes"))) as resp:
            assert resp.status == 429
            assert (await resp.json())["error"] == "too-many-requests"


async def test_oversized_bodies_are_refused(server: tuple[TestServer, RateLimiter]) -> None:
    srv, _ = server
    url = str(srv.make_url("/v1/simulate"))

    async def chunks(total: int) -> AsyncIterator[bytes]:
        for _ in range(total // 256):
            yield b"x" * 256

    async with _client("127.0.0.5") as session:
        async with session.post(url, data=b"x" * 1024) as resp:
            assert resp.status == 200
            assert (await resp.json())["bytes"] == 1024
        async with session.post(url, data=b"x" * 1025) as resp:
            assert resp.status == 413
            body = await resp.json()
            assert body["error"] == "payload-too-large"
            assert "1025 bytes exceeds the limit of 1024" in body["message"]
        # no Content-Length: the limit holds while the handler reads
        async with session.post(url, data=chunks(4096)) as resp:
            assert resp.status == 413
        async with session.post(url, data=chunks(512)) as resp:
            assert resp.status == 200
