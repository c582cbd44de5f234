"""``Http1Pool.reuse_above``: once that many connections carry a request, the next request that
finds none idle waits up to ``reuse_wait_s`` for one to come back instead of opening another (a
TLS handshake each); it opens its own when none comes back in time, a cancelled wait leaves the
connection it was handed to the next request, and a closed pool fails the requests waiting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from common.kube.http1 import Http1Pool
from tests.support.loopback_server import HoldingServer


class Server(HoldingServer):
    """Answers ``/held/…`` once :attr:`release` is set (``/held/drop``: closes the connection
    once :attr:`drop` is), anything else at once."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = asyncio.Event()

    async def held(self, path: str) -> bool:
        if path == "/held/drop":
            await self.drop.wait()
            return False
        if path.startswith("/held/"):
            await self.release.wait()
        return True


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with Server() as server:
        yield server


def _pool(
    server: Server, *, above: int | None, wait_s: float, keepalive_s: float = 60.0
) -> Http1Pool:
    return Http1Pool(
        "127.0.0.1",
        server.port,
        authority=f"127.0.0.1:{server.port}",
        tls=None,
        keepalive_s=keepalive_s,
        reuse_above=above,
        reuse_wait_s=wait_s,
    )


async def _post(pool: Http1Pool, path: str) -> int:
    return (await pool.exchange("POST", path, {}, b"{}", timeout_s=5)).status


async def test_beyond_the_threshold_a_request_waits_for_a_connection_to_come_back(
    server: Server,
) -> None:
    pool = _pool(server, above=2, wait_s=60.0)
    held = [asyncio.create_task(_post(pool, f"/held/{i}")) for i in range(2)]
    await server.arrived(2)
    later = [asyncio.create_task(_post(pool, f"/pods/p{i}/binding")) for i in range(3)]
    await asyncio.sleep(0)
    assert server.paths == ["/held/0", "/held/1"]  # the three wait: no third connection
    server.release.set()
    assert await asyncio.gather(*held, *later) == [201] * 5
    assert sorted(server.paths[2:]) == ["/pods/p0/binding", "/pods/p1/binding", "/pods/p2/binding"]
    assert server.connections == pool.opened == 2
    await pool.close()


async def test_a_request_that_waited_in_vain_opens_its_own_connection(server: Server) -> None:
    pool = _pool(server, above=2, wait_s=0.0)
    held = [asyncio.create_task(_post(pool, f"/held/{i}")) for i in range(2)]
    await server.arrived(2)
    assert await _post(pool, "/pods/p/binding") == 201  # answered while both are still held
    assert server.connections == pool.opened == 3
    server.release.set()
    assert await asyncio.gather(*held) == [201, 201]
    assert pool.idle == 3
    await pool.close()


async def test_below_the_threshold_or_without_one_a_request_never_waits(server: Server) -> None:
    for above in (3, None):
        pool = _pool(server, above=above, wait_s=60.0)
        server.release.clear()
        held = [asyncio.create_task(_post(pool, f"/held/{above}-{i}")) for i in range(2)]
        await server.arrived(len(server.paths) + 2)
        assert await _post(pool, "/pods/p/binding") == 201
        assert pool.opened == 3
        server.release.set()
        await asyncio.gather(*held)
        await pool.close()


async def test_a_cancelled_wait_leaves_the_connection_to_the_next_request(
    server: Server,
) -> None:
    pool = _pool(server, above=1, wait_s=60.0)
    held = asyncio.create_task(_post(pool, "/held/0"))
    await server.arrived(1)
    given_up = asyncio.create_task(_post(pool, "/pods/given-up/binding"))
    last = asyncio.create_task(_post(pool, "/pods/last/binding"))
    await asyncio.sleep(0)
    given_up.cancel()
    server.release.set()
    assert list(await asyncio.gather(held, last)) == [201, 201]
    with pytest.raises(asyncio.CancelledError):
        await given_up
    assert "/pods/given-up/binding" not in server.paths
    assert server.connections == pool.opened == 1
    assert pool.idle == 1  # kept for the next request: not lost with the cancelled wait
    await pool.close()


async def test_a_dropped_connection_lets_a_waiting_request_open_its_own(
    server: Server,
) -> None:
    """… counted once as holding a connection: with every request done and no connection kept,
    the next request opens one at once."""
    pool = _pool(server, above=1, wait_s=60.0, keepalive_s=0.0)  # none kept for the next
    dropped = asyncio.create_task(_post(pool, "/held/drop"))
    await server.arrived(1)
    waiting = asyncio.create_task(_post(pool, "/pods/p/binding"))
    await asyncio.sleep(0)
    server.drop.set()
    with pytest.raises(ConnectionError):
        await dropped
    assert await waiting == 201  # on a connection of its own, without waiting a minute
    assert server.connections == pool.opened == 2
    async with asyncio.timeout(5):  # not the minute a request waiting to reuse one would
        assert await _post(pool, "/pods/next/binding") == 201
    assert server.connections == pool.opened == 3
    await pool.close()


async def test_closing_the_pool_fails_the_requests_waiting_for_a_connection(
    server: Server,
) -> None:
    pool = _pool(server, above=1, wait_s=60.0)
    held = asyncio.create_task(_post(pool, "/held/0"))
    await server.arrived(1)
    waiting = asyncio.create_task(_post(pool, "/pods/p/binding"))
    await asyncio.sleep(0)
    await pool.close()
    with pytest.raises(ConnectionError, match="closed"):
        await waiting
    server.release.set()
    assert await held == 201  # the request already sent still gets its reply
    assert server.connections == 1
