"""A server on a local socket for the HTTP client's tests: each connection is handed to
:meth:`LoopbackServer.serve` (which subclasses write), counted, and closed when ``serve``
returns or the client goes; TLS with ``ssl``. ``async with`` starts and stops it."""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from typing import Self


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
