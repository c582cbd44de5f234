"""A lean HTTP/1.1 exchange for the API server's ordinary requests (one JSON body each way).

aiohttp's ``ClientSession.request`` does a great deal per request that a request to the API
server never needs: it builds a ``ClientRequest`` and a ``ClientResponse`` (headers merged into
multidicts, cookies filtered, auto headers, a payload object looked up in a registry, a timer
context, the response's stream reader and its flow control). ``benchmarks/request_cpu.py`` (a
bind-sized POST over TLS to a server that answers at once, 64 in flight, uvloop): 87-93 µs of
client CPU per request through aiohttp, 29 µs here (load 1.5). With two such requests per pod
(the bind and its Event) that was about a tenth of the coordinator's CPU per pod.

:class:`Http1Pool` keeps connections to one server open (keep-alive, the most recently used
first, idle ones closed after ``keepalive_s``) and sends one request at a time on each, with the
same TLS context and server name as the aiohttp session it stands beside. What it covers and what
it does not:

- a reply is read whole: ``Content-Length``, ``Transfer-Encoding: chunked`` or to the end of the
  connection; watches and other streams stay on aiohttp;
- no ``Accept-Encoding`` is sent, so the reply is never compressed (one that is anyway is refused
  with :class:`BadReply`); no proxy (the caller uses aiohttp when one is set), no redirects, no
  cookies (the API server sets none);
- every failure — a refused or dropped connection, a reply that is not HTTP/1.x, the timeout —
  is an ``OSError`` (``ConnectionError`` / ``TimeoutError``), as aiohttp's would be, and the
  connection it happened on is closed, never reused. A request is never sent twice here: whether
  to retry is the caller's ``RetryPolicy``'s to say.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["BadReply", "Http1Pool", "Reply"]

_HEAD_LIMIT: Final = 1 << 20  # a reply's status line and headers (and a chunk-size line)
_NO_BODY: Final = frozenset({204, 304})


class BadReply(ConnectionError):
    """The server's answer is not an HTTP/1.x reply this client can read."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    reason: str
    headers: Mapping[str, str]
    """Header names in lower case; a repeated header's values joined by ``", "``."""
    body: bytes


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Http1Pool:
    """Connections to ``host``:``port`` (TLS with ``tls``; ``authority`` is the ``Host``
    header). Event-loop only; :meth:`close` closes the idle connections and any returned later."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        authority: str,
        tls: ssl.SSLContext | None,
        server_hostname: str | None = None,
        keepalive_s: float = 60.0,
    ) -> None:
        self.host, self.port, self.authority = host, port, authority
        self._tls = tls
        self._server_hostname = server_hostname
        self.keepalive_s = keepalive_s
        self._idle: list[_Connection] = []  # most recently used last
        self._closed = False
        self.opened = 0
        """Connections opened so far."""

    @property
    def idle(self) -> int:
        return len(self._idle)

    async def exchange(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        timeout_s: float | None,
    ) -> Reply:
        """Send one request (``target``: the encoded path and query) and read its reply."""
        request = _request_bytes(method, target, self.authority, headers, body)
        async with asyncio.timeout(timeout_s):
            connection = await self._take()
            try:
                connection.writer.write(request)
                reply, reusable = await _read_reply(connection.reader, method)
            except BaseException as exc:
                connection.close()
                if isinstance(exc, asyncio.IncompleteReadError | asyncio.LimitOverrunError):
                    raise BadReply(f"the reply ended or overran: {exc}") from exc
                raise
        if reusable:
            self._give_back(connection)
        else:
            connection.close()
        return reply

    async def _take(self) -> _Connection:
        if self._closed:
            raise ConnectionError("the connection pool is closed")
        now = asyncio.get_running_loop().time()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since < self.keepalive_s and connection.usable():
                return connection
            connection.close()
        reader, writer = await asyncio.open_connection(
            self.host,
            self.port,
            ssl=self._tls,
            server_hostname=(self._server_hostname or self.host) if self._tls else None,
            limit=_HEAD_LIMIT,
        )
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.opened += 1
        return _Connection(reader, writer)

    def _give_back(self, connection: _Connection) -> None:
        if self._closed or not connection.usable():
            connection.close()
            return
        now = asyncio.get_running_loop().time()
        connection.idle_since = now
        self._idle.append(connection)
        while self._idle and now - self._idle[0].idle_since >= self.keepalive_s:
            self._idle.pop(0).close()

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
        for connection in idle:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.writer.wait_closed(), 1.0)


def _request_bytes(
    method: str, target: str, authority: str, headers: Mapping[str, str], body: bytes | None
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {authority}"]
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
            raise ValueError(f"header {name!r}: a line break or colon has no place in it")
        lines.append(f"{name}: {value}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


async def _read_reply(reader: asyncio.StreamReader, method: str) -> tuple[Reply, bool]:
    """The reply, and whether its connection may carry another request."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or not code.isdigit():
        raise BadReply(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    status = int(code)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise BadReply(f"not a header line: {line[:80]!r}")
        key, value = name.strip().lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    encoding = headers.get("content-encoding", "identity").lower()
    if encoding != "identity":
        raise BadReply(f"a reply in Content-Encoding {encoding!r}, which was not asked for")
    keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
    if method == "HEAD" or status in _NO_BODY or status < 200:
        return Reply(status, reason, headers, b""), keep
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return Reply(status, reason, headers, await _chunked(reader)), keep
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise BadReply(f"Content-Length {length!r} is not a number")
        return Reply(status, reason, headers, await reader.readexactly(int(length))), keep
    return Reply(status, reason, headers, await reader.read()), False  # to the end


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        line = await reader.readuntil(b"\r\n")
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise BadReply(f"not a chunk size: {size_text[:40]!r}") from None
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass  # trailers: none wanted
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise BadReply("a chunk does not end with CRLF")
