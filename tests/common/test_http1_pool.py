"""``Http1Pool`` (``common.kube.http1``) against a scripted server on a local socket: replies with
a length, chunked or read to the end; connections kept, reused and dropped as HTTP/1.1 says; a
reply it cannot read is an error that closes its connection and leaves the next request alone."""

from __future__ import annotations

import asyncio
import gc
import re
from collections.abc import AsyncIterator, Callable

import pytest

from common.kube.http1 import BadReply, Http1Pool, _Collect, _read_reply
from tests.support.loopback_server import LoopbackServer

Script = Callable[[bytes], bytes | None]
"""A request (head and body) → the raw reply (``None``: close the connection)."""


class Server(LoopbackServer):
    def __init__(self, script: Script) -> None:
        super().__init__()
        self.script = script
        self.requests: list[bytes] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            request = head + await reader.readexactly(length)
            self.requests.append(request)
            reply = self.script(request)
            if reply is None:
                return
            writer.write(reply)
            await writer.drain()
            if b"Connection: close" in reply:
                return


def _reply(body: bytes, *, status: str = "200 OK", extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


@pytest.fixture
async def pool_of() -> AsyncIterator[Callable[[Server], Http1Pool]]:
    pools: list[Http1Pool] = []

    def make(server: Server, keepalive_s: float = 60.0) -> Http1Pool:
        pool = Http1Pool(
            "127.0.0.1",
            server.port,
            authority=f"127.0.0.1:{server.port}",
            tls=None,
            keepalive_s=keepalive_s,
        )
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        await pool.close()


async def test_requests_reuse_one_kept_connection_and_send_what_was_asked(
    pool_of: Callable[[Server], Http1Pool],
) -> None:
    async with Server(lambda request: _reply(b'{"ok":true}', status="201 Created")) as server:
        pool = pool_of(server)
        for i in range(3):
            reply = await pool.exchange(
                "POST",
                f"/api/v1/namespaces/ns/pods/p-{i}/binding",
                {"Authorization": "Bearer t", "Content-Type": "application/json"},
                b'{"a":1}',
                timeout_s=5,
            )
            assert (reply.status, reply.reason, reply.body) == (201, "Created", b'{"ok":true}')
            assert reply.headers["content-type"] == "application/json"
        assert server.connections == 1
        first = server.requests[0]
        assert first.startswith(b"POST /api/v1/namespaces/ns/pods/p-0/binding HTTP/1.1\r\n")
        assert f"Host: 127.0.0.1:{server.port}\r\n".encode() in first
        assert b"Authorization: Bearer t\r\n" in first
        assert first.endswith(b'Content-Length: 7\r\n\r\n{"a":1}')


async def test_replies_read_leave_nothing_for_the_garbage_collector(
    pool_of: Callable[[Server], Http1Pool],
) -> None:
    """Each reply's parser state is freed when the reply is read, not left in a reference cycle
    for the collector: two requests per bound pod made a gen-0 pass every ~150 ms of CPU."""
    async with Server(lambda request: _reply(b'{"ok":true}')) as server:
        pool = pool_of(server)
        flags = gc.get_debug()
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a pass finds unreachable stays in gc.garbage
        try:
            for _ in range(20):
                reply = await pool.exchange("GET", "/api/v1/pods", {}, None, timeout_s=5)
                assert reply.body == b'{"ok":true}'
            gc.collect()
            left = [o for o in gc.garbage if isinstance(o, _Collect)]
        finally:
            gc.set_debug(flags)
            gc.garbage.clear()
        assert left == []


async def test_a_chunked_reply_is_joined(pool_of: Callable[[Server], Http1Pool]) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5\r\n{"a":\r\n4;ext=1\r\n"b"}\r\n0\r\n\r\n'
    )
    async with Server(lambda request: chunked) as server:
        pool = pool_of(server)
        for _ in range(2):
            reply = await pool.exchange("GET", "/api/v1/pods", {}, None, timeout_s=5)
            assert reply.body == b'{"a":"b"}'
        assert server.connections == 1  # the connection stays usable after a chunked reply


async def test_connection_close_and_a_reply_to_the_end_open_a_new_connection(
    pool_of: Callable[[Server], Http1Pool],
) -> None:
    replies = iter(
        [
            _reply(b"{}", extra="Connection: close\r\n"),
            b'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{"to":"end"}',
            _reply(b"{}"),
        ]
    )
    async with Server(lambda request: next(replies)) as server:
        pool = pool_of(server)
        assert (await pool.exchange("GET", "/a", {}, None, timeout_s=5)).body == b"{}"
        assert (await pool.exchange("GET", "/b", {}, None, timeout_s=5)).body == b'{"to":"end"}'
        assert (await pool.exchange("GET", "/c", {}, None, timeout_s=5)).body == b"{}"
        assert server.connections == 3
        assert pool.idle == 1


async def test_an_unreadable_reply_fails_that_request_only(
    pool_of: Callable[[Server], Http1Pool],
) -> None:
    replies = iter([b"SPDY/3 200 OK\r\n\r\n", _reply(b"{}")])
    async with Server(lambda request: next(replies)) as server:
        pool = pool_of(server)
        with pytest.raises(BadReply, match=re.escape("at 'SPDY/3 200 OK'")):
            await pool.exchange("GET", "/a", {}, None, timeout_s=5)
        assert pool.idle == 0  # never given back
        assert (await pool.exchange("GET", "/b", {}, None, timeout_s=5)).body == b"{}"
        assert server.connections == 2


async def test_a_connection_dropped_mid_reply_is_a_connection_error(
    pool_of: Callable[[Server], Http1Pool],
) -> None:
    async with Server(
        lambda request: b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 50\r\n\r\n{"
    ) as srv:
        pool = pool_of(srv)
        with pytest.raises(ConnectionError, match="the reply ended"):
            await pool.exchange("GET", "/a", {}, None, timeout_s=5)


async def test_a_compressed_reply_is_refused_by_name(
    pool_of: Callable[[Server], Http1Pool],
) -> None:
    async with Server(lambda request: _reply(b"xx", extra="Content-Encoding: gzip\r\n")) as srv:
        pool = pool_of(srv)
        with pytest.raises(BadReply, match="Content-Encoding 'gzip'"):
            await pool.exchange("GET", "/a", {}, None, timeout_s=5)


async def test_no_reply_within_the_timeout_raises_timeout_and_drops_the_connection() -> None:
    held: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # reads nothing, answers nothing

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    pool = Http1Pool("127.0.0.1", server.sockets[0].getsockname()[1], authority="x", tls=None)
    try:
        with pytest.raises(TimeoutError):
            await pool.exchange("GET", "/a", {}, None, timeout_s=0.05)
        assert pool.idle == 0
    finally:
        await pool.close()
        for writer in held:
            writer.close()
        server.close()


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent(
    pool_of: Callable[[Server], Http1Pool],
) -> None:
    async with Server(lambda request: _reply(b"{}")) as server:
        pool = pool_of(server)
        with pytest.raises(ValueError, match="header 'Authorization'"):
            await pool.exchange("GET", "/a", {"Authorization": "t\r\nX: y"}, None, timeout_s=5)
        assert server.requests == []
        assert (await pool.exchange("GET", "/a", {}, None, timeout_s=5)).status == 200


async def test_idle_connections_older_than_the_keepalive_are_not_reused(
    pool_of: Callable[..., Http1Pool],
) -> None:
    async with Server(lambda request: _reply(b"{}")) as server:
        pool = pool_of(server, keepalive_s=0.0)
        await pool.exchange("GET", "/a", {}, None, timeout_s=5)
        await pool.exchange("GET", "/b", {}, None, timeout_s=5)
        assert server.connections == 2


async def test_a_closed_pool_refuses_requests(pool_of: Callable[[Server], Http1Pool]) -> None:
    async with Server(lambda request: _reply(b"{}")) as server:
        pool = pool_of(server)
        await pool.exchange("GET", "/a", {}, None, timeout_s=5)
        await pool.close()
        assert pool.idle == 0
        with pytest.raises(ConnectionError, match="closed"):
            await pool.exchange("GET", "/a", {}, None, timeout_s=5)


@pytest.mark.parametrize(
    ("raw", "body"),
    [
        (_reply(b'{"kind":"Binding"}', extra="Retry-After: 1\r\n"), b'{"kind":"Binding"}'),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'4\r\n{"a"\r\n5\r\n:"b"}\r\n0\r\n\r\n',
            b'{"a":"b"}',
        ),
    ],
    ids=["length", "chunked"],
)
async def test_a_reply_split_over_many_reads_is_read_whole(raw: bytes, body: bytes) -> None:
    # The server's bytes come in pieces of three: the status line, a header, a chunk-size line
    # and the body each cut across reads, as TCP may deliver them.
    reader = asyncio.StreamReader()
    reading = asyncio.create_task(_read_reply(reader, "POST"))
    for start in range(0, len(raw), 3):
        assert not reading.done()
        reader.feed_data(raw[start : start + 3])
        await asyncio.sleep(0)  # one loop turn: the reader takes what has come
    reply, reusable = await reading
    assert (reply.status, reply.reason, reply.body) == (200, "OK", body)
    assert reusable
