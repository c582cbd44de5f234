"""``Http1Pool``'s deferrable requests (Events, status explanations): at most
``deferrable_limit`` of them on connections at once — one more waits for one of theirs to finish
and takes its connection, instead of opening another (a TLS handshake each) or taking an idle one
a bind would then miss — while a request that is not deferrable (a bind) never waits for a
connection; every waiting request is still sent, and a dropped connection, a cancelled wait or a
closed pool leaves nobody waiting for ever."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from common.kube.http1 import CalledOff, Http1Pool
from tests.support.loopback_server import HoldingServer


class Server(HoldingServer):
    """Answers ``/events/…`` once :attr:`release` is set (``/events/drop…``: closes the
    connection instead), anything else at once."""

    async def held(self, path: str) -> bool:
        if path.startswith("/events/"):
            await self.release.wait()
            return not path.startswith("/events/drop")
        return True


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with Server() as server:
        yield server


@pytest.fixture
async def pool(server: Server) -> AsyncIterator[Http1Pool]:
    pool = Http1Pool(
        "127.0.0.1",
        server.port,
        authority=f"127.0.0.1:{server.port}",
        tls=None,
        deferrable_limit=2,
    )
    yield pool
    await pool.close()


async def _event(pool: Http1Pool, name: str) -> int:
    reply = await pool.exchange(
        "POST", f"/events/{name}", {}, b"{}", timeout_s=5, deferrable=lambda: True
    )
    return reply.status


async def test_events_beyond_the_limit_wait_for_a_kept_connection_and_a_bind_does_not(
    server: Server, pool: Http1Pool
) -> None:
    events = [asyncio.create_task(_event(pool, f"e{i}")) for i in range(6)]
    await server.arrived(2)
    assert server.connections == 2  # the other four wait for one of these two

    bind = await pool.exchange("POST", "/pods/p/binding", {}, b"{}", timeout_s=5)
    assert bind.status == 201  # answered while all six Events are still held
    assert server.connections == 3  # the bind opened one of its own

    server.release.set()
    assert await asyncio.gather(*events) == [201] * 6  # every Event sent and answered
    assert sorted(p for p in server.paths if p.startswith("/events/")) == [
        f"/events/e{i}" for i in range(6)
    ]
    assert server.connections == 3  # none opened for the four that waited
    assert pool.opened == 3


async def test_events_beyond_the_limit_wait_even_beside_idle_connections(
    server: Server, pool: Http1Pool
) -> None:
    """Idle connections are the binds' next burst: an Event taking one would make a bind open
    another."""
    binds = [pool.exchange("POST", f"/pods/p{i}/binding", {}, b"{}", timeout_s=5) for i in range(4)]
    assert [reply.status for reply in await asyncio.gather(*binds)] == [201] * 4
    assert pool.idle == 4  # a burst of binds left four connections open

    events = [asyncio.create_task(_event(pool, f"e{i}")) for i in range(5)]
    await server.arrived(4 + 2)
    bind = await pool.exchange("POST", "/pods/late/binding", {}, b"{}", timeout_s=5)
    assert bind.status == 201  # on one of the two connections still idle
    assert sum(p.startswith("/events/") for p in server.paths) == 2  # three Events wait
    server.release.set()
    assert await asyncio.gather(*events) == [201] * 5
    assert server.connections == 4


async def test_a_dropped_connection_lets_a_waiting_event_open_another(
    server: Server, pool: Http1Pool
) -> None:
    dropped = [asyncio.create_task(_event(pool, f"drop{i}")) for i in range(2)]
    waiting = asyncio.create_task(_event(pool, "after"))
    await server.arrived(2)
    server.release.set()
    for task in dropped:
        with pytest.raises(ConnectionError):
            await task
    assert await waiting == 201  # sent on a connection opened in place of a dropped one
    assert server.connections == 3


async def test_a_cancelled_wait_hands_its_turn_on(server: Server, pool: Http1Pool) -> None:
    held = [asyncio.create_task(_event(pool, f"h{i}")) for i in range(2)]
    await server.arrived(2)
    given_up = asyncio.create_task(_event(pool, "given-up"))
    last = asyncio.create_task(_event(pool, "last"))
    await asyncio.sleep(0)  # both are waiting for a connection now
    given_up.cancel()
    server.release.set()
    assert await asyncio.gather(*held, last) == [201, 201, 201]
    with pytest.raises(asyncio.CancelledError):
        await given_up
    assert "/events/given-up" not in server.paths
    assert server.connections == 2
    assert pool.idle == 2  # both kept for the next request: none lost with the cancelled wait


async def test_a_request_called_off_while_it_waited_is_never_sent(
    server: Server, pool: Http1Pool
) -> None:
    """A status explanation asks once it has a connection whether it is still wanted (the pod
    may have been bound meanwhile; the bind waits only for explanations already on the wire)."""
    held = [asyncio.create_task(_event(pool, f"h{i}")) for i in range(2)]
    await server.arrived(2)
    bound = False
    explanation = asyncio.create_task(
        pool.exchange(
            "PATCH", "/events/explain", {}, b"{}", timeout_s=5, deferrable=lambda: not bound
        )
    )
    after = asyncio.create_task(_event(pool, "after"))
    bound = True
    server.release.set()
    with pytest.raises(CalledOff, match="PATCH /events/explain"):
        await explanation
    assert await asyncio.gather(*held, after) == [201, 201, 201]
    assert "/events/explain" not in server.paths
    assert server.connections == 2  # its turn and connection passed on to the next Event


async def test_closing_the_pool_fails_the_events_waiting_for_a_connection(
    server: Server, pool: Http1Pool
) -> None:
    held = [asyncio.create_task(_event(pool, f"h{i}")) for i in range(2)]
    await server.arrived(2)
    waiting = asyncio.create_task(_event(pool, "waiting"))
    await asyncio.sleep(0)
    await pool.close()
    with pytest.raises(ConnectionError, match="closed"):
        await waiting
    server.release.set()
    assert await asyncio.gather(*held) == [201, 201]  # those already sent still get their reply
    assert server.connections == 2
