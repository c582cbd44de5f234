"""``Http1Pool`` (``common.kube.http1``) over TLS: a connection opened after another has carried a
reply resumes that one's TLS session (the server signs no certificate again), on asyncio's loop
and on uvloop's, and a server that no longer knows the session is given a full handshake that
works."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from common.kube.http1 import Http1Pool
from devcluster import pki
from tests.support.loopback_server import LoopbackServer

_BODY = b'{"kind":"Status","status":"Success"}'
_REPLY = (
    b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
    + f"Content-Length: {len(_BODY)}\r\n\r\n".encode()
    + _BODY
)


class TlsServer(LoopbackServer):
    """Answers every request with ``_REPLY``; records, per connection, whether its TLS session
    was resumed. A fresh server context each: its session tickets are its own."""

    def __init__(self, directory: Path) -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
        super().__init__(ssl=context)
        self.resumed: list[bool] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.resumed.append(bool(writer.get_extra_info("ssl_object").session_reused))
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(_REPLY)
            await writer.drain()


@pytest.fixture
def certificates(tmp_path: Path) -> Path:
    ca = pki.make_ca("topos-test-ca")
    pki.write_pair(ca, tmp_path, "ca")
    pki.write_pair(pki.make_serving_cert(ca, ips=("127.0.0.1",)), tmp_path, "tls")
    return tmp_path


def _pool(server: TlsServer, client: ssl.SSLContext) -> Http1Pool:
    return Http1Pool(
        "127.0.0.1",
        server.port,
        authority=f"127.0.0.1:{server.port}",
        tls=client,
        server_hostname="127.0.0.1",
    )


async def _bind(pool: Http1Pool) -> int:
    reply = await pool.exchange(
        "POST", "/api/v1/namespaces/ns/pods/p/binding", {}, b"{}", timeout_s=5
    )
    assert reply.body == _BODY
    return reply.status


async def _later_connections_resume(certificates: Path) -> None:
    client = ssl.create_default_context(cafile=str(certificates / "ca.crt"))
    async with TlsServer(certificates) as server:
        pool = _pool(server, client)
        try:
            assert await _bind(pool) == 201  # the first connection: a full handshake
            # three at once: the idle connection and two new ones, which offer its session
            assert await asyncio.gather(*(_bind(pool) for _ in range(3))) == [201] * 3
        finally:
            await pool.close()
    assert server.resumed == [False, True, True]
    assert (pool.opened, pool.resumed) == (3, 2)


async def test_a_new_connection_resumes_the_tls_session_of_an_earlier_one(
    certificates: Path,
) -> None:
    await _later_connections_resume(certificates)


def test_the_session_is_resumed_on_uvloop_too(certificates: Path) -> None:
    run: Callable[[Coroutine[Any, Any, None]], None] = uvloop.run
    run(_later_connections_resume(certificates))


async def test_a_server_that_no_longer_knows_the_session_gets_a_full_handshake(
    certificates: Path,
) -> None:
    """A restarted API server has new ticket keys: the session kept from the old one is offered,
    refused, and the connection is made anyway; the next one resumes the new server's."""
    client = ssl.create_default_context(cafile=str(certificates / "ca.crt"))
    async with TlsServer(certificates) as before:
        pool = _pool(before, client)
        assert await _bind(pool) == 201
        await pool.close()
    async with TlsServer(certificates) as after:
        pool = _pool(after, client)
        try:
            assert await asyncio.gather(*(_bind(pool) for _ in range(2))) == [201, 201]
            assert await asyncio.gather(*(_bind(pool) for _ in range(3))) == [201] * 3
        finally:
            await pool.close()
    assert before.resumed == [False]
    assert after.resumed == [False, False, True]
    assert pool.resumed == 1
