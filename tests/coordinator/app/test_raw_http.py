"""The coordinator's listener as a careless or hostile client meets it: raw bytes over a socket to
the wired application (``wire`` + ``running``, as ``topos coordinator`` serves it).

* A declared ``Content-Length`` over the body limit is answered 413 from the header, and the
  reply *ends* at once (plain HTTP and TLS) — the body is never waited for.
* Malformed HTTP gets its 400 and is logged as the client's mistake (DEBUG, one line, no
  traceback), never as an ERROR of ours; so are a body that cannot be decoded and a client
  hanging up in the middle of its body.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from aiohttp import web

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.api.limits import LimitSettings
from coordinator.app.config.sections import Config, TlsSection
from coordinator.app.main import IDLE_CONNECTION_S, running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.app.security import listener_tls
from coordinator.inventory.store import Inventory
from devcluster import pki
from tests.support.polling import eventually

LIMIT = 64 * 1024


async def _exchange(
    port: int,
    data: bytes,
    *,
    tls: ssl.SSLContext | None = None,
    within_s: float = 5.0,
    hang_up: bool = False,
) -> tuple[bytes, float]:
    """Send ``data`` (``hang_up``: and shut our side), then read until the server ends the
    connection: (all bytes, seconds)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    started = time.monotonic()
    writer.write(data)
    await writer.drain()
    if hang_up:
        writer.write_eof()
    received = b""
    try:
        async with asyncio.timeout(within_s):
            while chunk := await reader.read(65536):
                received += chunk
    except (ConnectionResetError, ssl.SSLError):
        pass  # the server closed with our unread bytes: what arrived before counts
    finally:
        writer.close()
    return received, time.monotonic() - started


async def _logged(caplog: pytest.LogCaptureFixture, text: str) -> None:
    """Wait for the server's own line about the exchange (it logs after it answered): what it
    logs for that connection is in ``caplog`` by then."""
    await eventually(
        lambda: any(text in r.getMessage() for r in caplog.records), what=repr(text), timeout_s=10
    )


@pytest.fixture
async def port() -> AsyncIterator[int]:
    config = Config(limits=LimitSettings(max_body_bytes=LIMIT))
    app = wire(config, MemoryBackend(MemoryCluster(Inventory())))
    async with running(app) as url:
        yield int(url.rsplit(":", 1)[1])


def _post(content_length: int, body: bytes, *extra: bytes) -> bytes:
    head = [
        b"POST /v1/simulate HTTP/1.1",
        b"Host: coordinator",
        b"Content-Type: application/json",
        b"Content-Length: %d" % content_length,
        *extra,
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


@pytest.mark.parametrize("extra", [(), (b"Connection: keep-alive",), (b"Connection: close",)])
async def test_a_declared_body_over_the_limit_is_refused_at_once(
    port: int, extra: tuple[bytes, ...]
) -> None:
    reply, seconds = await _exchange(port, _post(100_000_000, b"{}", *extra))
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert b"exceeds the limit of 65536 bytes" in reply
    assert b"\r\nConnection: close\r\n" in reply
    assert seconds < 1.0  # the whole reply, connection ended; not the 10 s lingering close


async def test_a_body_within_the_limit_is_still_read(port: int) -> None:
    body = msgspec.json.encode({"pods": []})
    reply, _ = await _exchange(port, _post(len(body), body, b"Connection: close"))
    assert not reply.startswith(b"HTTP/1.1 413 ")
    assert reply.startswith(b"HTTP/1.1 ")


async def test_the_same_refusal_ends_at_once_over_tls(tmp_path: Path) -> None:
    ca = pki.make_ca("topos-test-ca")
    pki.write_pair(ca, tmp_path, "ca")
    pki.write_pair(pki.make_serving_cert(ca, ips=("127.0.0.1",)), tmp_path, "tls")
    tls = TlsSection(cert_file=str(tmp_path / "tls.crt"), key_file=str(tmp_path / "tls.key"))
    config = Config(tls=tls, limits=LimitSettings(max_body_bytes=LIMIT))
    app = wire(config, MemoryBackend(MemoryCluster(Inventory())))
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    async with running(app, ssl_context=listener_tls(tls)) as url:
        port = int(url.rsplit(":", 1)[1])
        reply, seconds = await _exchange(port, _post(100_000_000, b"x" * 1000), tls=client)
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert seconds < 1.0


MALFORMED = {
    "header-without-colon": b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    "bad-content-length": b"POST /v1/simulate HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n",
    "bad-version": b"GET /healthz HTTP/9.Z\r\nHost: x\r\n\r\n",
    "control-bytes-in-path": b"GET /\x01\x02 HTTP/1.1\r\nHost: x\r\n\r\n",
    "garbage-after-a-good-request": (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\x16\x03\x01\x02\x00\x01\x00\x01\xfc\r\n\r\n"
    ),
}


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
async def test_malformed_http_is_a_400_and_no_error_in_the_log(
    port: int, data: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    reply, _ = await _exchange(port, data)
    assert b"HTTP/1.0 400 Bad Request" in reply or b"HTTP/1.1 400 Bad Request" in reply
    await _logged(caplog, "malformed HTTP request")
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [], [r.getMessage() for r in loud]
    assert [r for r in caplog.records if r.exc_info or r.exc_text] == []
    told = [r.getMessage() for r in caplog.records if "malformed HTTP request" in r.getMessage()]
    assert len(told) == 1
    assert "127.0.0.1" in told[0]


async def test_a_client_hanging_up_mid_body_is_no_error_of_ours(
    port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await _exchange(port, _post(1000, b'{"pods": ['), hang_up=True)
    await _logged(caplog, "left during POST /v1/simulate")
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [], [r.getMessage() for r in loud]
    assert [r for r in caplog.records if r.exc_info or r.exc_text] == []
    assert any("left during POST /v1/simulate" in r.getMessage() for r in caplog.records)


async def test_a_body_that_cannot_be_decoded_is_a_400_and_no_error_in_the_log(
    port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    not_gzip = _post(8, b"not gzip", b"Content-Encoding: gzip")
    reply, _ = await _exchange(port, not_gzip)
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert b'"error":"bad-request"' in reply
    assert b"malformed request body" in reply
    await _logged(caplog, "refused a malformed HTTP request")
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [], [r.getMessage() for r in loud]
    assert [r for r in caplog.records if r.exc_info or r.exc_text] == []


async def test_a_connection_that_never_sends_a_request_is_closed_when_idle() -> None:
    """aiohttp's own default keeps such a socket an hour: a client that opens many and says
    nothing would hold as many file descriptors."""
    app = wire(Config(), MemoryBackend(MemoryCluster(Inventory())))
    async with running(app, idle_s=0.3) as url:
        port = int(url.rsplit(":", 1)[1])
        silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(5)]
        started = time.monotonic()
        for reader, writer in silent:
            async with asyncio.timeout(5):
                assert await reader.read(100) == b""  # the server ended it
            writer.close()
        assert time.monotonic() - started < 3
    assert IDLE_CONNECTION_S <= 120  # the coordinator's default, far below aiohttp's 3,630 s


async def test_a_client_gone_before_its_answer_is_no_error_of_ours(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A TLS client that sends close_notify right after its request leaves the transport closing
    when the answer is written: aiohttp raises a reset, which is the client's leaving."""
    from unittest import mock

    from aiohttp.test_utils import make_mocked_request

    from coordinator.api.errors import error_middleware

    caplog.set_level(logging.DEBUG)
    closing = mock.Mock()
    closing.is_closing.return_value = True
    request = make_mocked_request("GET", "/v1/nodes", transport=closing)

    async def handler(_: web.Request) -> web.StreamResponse:
        raise ConnectionResetError("Cannot write to closing transport")

    response = await error_middleware(request, handler)
    assert response.status == 400
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("left during GET /v1/nodes" in r.getMessage() for r in caplog.records)

    open_ = mock.Mock()
    open_.is_closing.return_value = False
    caplog.clear()
    response = await error_middleware(make_mocked_request("GET", "/", transport=open_), handler)
    assert response.status == 500  # a reset on a live connection is ours to look into
    assert any(r.levelno == logging.ERROR for r in caplog.records)
