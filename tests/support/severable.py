"""A TCP forwarder to the test API server that a test can sever and restore: the API server gone
and back, for a client given :meth:`Severable.kubeconfig`, while the shared control plane (and
every other client of it) runs on.

Severed, every open connection is dropped and new ones are refused (the port is closed), as when
the kube-apiserver process stops; restored, the same port accepts again. Bytes pass through
unread, so TLS runs end to end (the API server's certificate names 127.0.0.1, not a port).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import yaml


class Severable:
    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 443)
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self.port = 0

    async def restore(self) -> None:
        """Accept connections (again, on the same port)."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def sever(self) -> None:
        """Close the port and drop every connection through it."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for pipe in tuple(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    def kubeconfig(self, kubeconfig: Path, path: Path) -> Path:
        """``kubeconfig`` with its server replaced by this forwarder, written to ``path``."""
        config = yaml.safe_load(kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        path.write_text(yaml.safe_dump(config))
        return path

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.close()
            self._pipes.discard(task)
            return
        try:
            await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
        finally:
            self._pipes.discard(task)
            for w in (writer, up_writer):
                w.transport.abort()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.write_eof()


@contextlib.asynccontextmanager
async def severable(kubeconfig: Path) -> AsyncIterator[Severable]:
    """A forwarder to ``kubeconfig``'s API server, accepting; severed on exit."""
    forwarder = Severable(_server(kubeconfig))
    await forwarder.restore()
    try:
        yield forwarder
    finally:
        await forwarder.sever()


def _server(kubeconfig: Path) -> str:
    server: str = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    return server
