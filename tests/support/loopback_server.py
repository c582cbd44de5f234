"""A server on a local socket for the HTTP client's tests: each connection is handed to
:meth:`LoopbackServer.serve` (which subclasses write), counted, and closed when ``serve``
returns or the client goes; TLS with ``ssl``. ``async with`` starts and stops it."""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from typing import Final, Self


class LoopbackServer:
    def __init__(self, *, ssl: ssl_module.SSLContext | None = None) -> None:
        self.connections = 0
        self.port = 0
        self._ssl = ssl
        self._server: asyncio.Server | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection, until it should close."""
        raise NotImplementedError

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.serve(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


_CREATED: Final = (
    b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
)


def _body_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


class HoldingServer(LoopbackServer):
    """Records each request's path (:attr:`paths`, :meth:`arrived`) and answers it ``201 {}``
    once :meth:`held` lets it: a subclass holds some paths until :attr:`release` is set (set on
    exit too), or closes their connection instead."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.paths: list[str] = []
        self._arrived = asyncio.Condition()

    async def arrived(self, count: int) -> None:
        """Until ``count`` requests have come in."""
        async with self._arrived:
            await self._arrived.wait_for(lambda: len(self.paths) >= count)

    async def held(self, path: str) -> bool:
        """Before ``path``'s reply: whether to send it (``False``: the connection is closed)."""
        return True

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(_body_length(head))
            path = head.split(b" ", 2)[1].decode()
            async with self._arrived:
                self.paths.append(path)
                self._arrived.notify_all()
            if not await self.held(path):
                return
            writer.write(_CREATED)
            await writer.drain()

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        await super().__aexit__(*exc)
