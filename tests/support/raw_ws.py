"""A bare WebSocket client on a plain TCP socket, for what a well-behaved client library won't do:
hang up right after a frame without reading the answer, or open a stream and say nothing."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import ssl
import struct
from urllib.parse import urlsplit


class RawWebSocket:
    """One upgraded connection; :meth:`open` performs the handshake."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(
        cls, url: str, path: str = "/v1/agents/stream", *, tls: ssl.SSLContext | None = None
    ) -> RawWebSocket:
        parts = urlsplit(url)
        assert parts.hostname is not None
        assert parts.port is not None
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port, ssl=tls)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        return cls(reader, writer)

    def send_binary(self, payload: bytes) -> None:
        """Queue one binary frame."""
        self.send_frame(0x2, payload)

    def send_ping(self) -> None:
        self.send_frame(0x9, b"ping")

    def send_frame(self, opcode: int, payload: bytes) -> None:
        """Queue one final, masked frame (clients must mask)."""
        n, first = len(payload), 0x80 | opcode
        if n < 126:
            header = struct.pack("!BB", first, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", first, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", first, 0x80 | 127, n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(header + mask + masked)

    async def read_close(self) -> tuple[int, str]:
        """Read frames until the server's close frame, answer it; its code and message."""
        while True:
            opcode, body = await self.read_frame()
            if opcode == 0x8:
                code = struct.unpack("!H", body[:2])[0] if len(body) >= 2 else 1005
                self.send_frame(0x8, body[:2])
                return code, body[2:].decode("utf-8", errors="replace")

    async def read_frame(self) -> tuple[int, bytes]:
        """The next frame's opcode and payload (a hang guard, not a deadline: 60 s)."""
        async with asyncio.timeout(60):
            return await self._read_frame()

    async def _read_frame(self) -> tuple[int, bytes]:
        first, second = await self.reader.readexactly(2)
        n = second & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", await self.reader.readexactly(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", await self.reader.readexactly(8))
        return first & 0x0F, await self.reader.readexactly(n)

    async def at_eof(self) -> bool:
        """Whether the server has closed the TCP connection (reads what is left)."""
        async with asyncio.timeout(60):
            await self.reader.read()
        return self.reader.at_eof()

    def abort(self) -> None:
        """Drop the TCP connection at once (what a crashed or killed agent does)."""
        self.writer.transport.abort()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()
