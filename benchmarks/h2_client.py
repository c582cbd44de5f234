"""A minimal HTTP/2 client on ``h2`` (pure Python), for ``benchmarks/request_cpu.py`` to measure
beside ``common.kube.http1``: every request a stream on one TLS connection (ALPN ``h2``), as
kube-scheduler's client-go multiplexes all of its requests. Headers go out unindexed where they
change per request (``:path``, ``content-length``) so hpack's dynamic table stays small (indexed,
a path per bind filled it and every header's table search walked it); the frames of the requests
made in one turn of the event loop are written at once. No priorities, no push, no trailers, no
waiting for the server's flow-control window or stream limit (a body within 64 KiB, fewer
streams at once than the server allows: bind- and Event-sized requests, 64 in flight); GOAWAY, a
reset stream or a lost connection fail the requests they cut off.

``h2`` is not a dependency of Topos (it lost: see ``benchmarks/request_cpu.py``); install it to
run this arm (``pip install h2``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Mapping
from typing import cast

import h2.config
import h2.connection
import h2.events
import h2.settings
from hpack import NeverIndexedHeaderTuple

__all__ = ["H2Connection", "connect"]

logging.getLogger("hpack").disabled = True  # a debug call per header otherwise (~4 % of CPU)

_Pending = tuple["asyncio.Future[tuple[int, bytes]]", list[bytes]]


class H2Connection(asyncio.Protocol):
    """One client connection; :func:`connect` makes it."""

    def __init__(self, authority: str) -> None:
        self._h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=True,
                header_encoding=None,
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
                validate_inbound_headers=False,
                normalize_inbound_headers=False,
            )
        )
        self._authority = authority.encode()
        self._streams: dict[int, _Pending] = {}
        self._status: dict[int, int] = {}
        self._transport: asyncio.Transport | None = None
        self._flush_due = False
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's: no subclass of it
        self._h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24,
            },
        )
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(1 << 30)
        self._transport.write(self._h2.data_to_send())
        self.ready.set_result(None)

    def data_received(self, data: bytes) -> None:
        for event in self._h2.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                status = next(v for k, v in event.headers or () if k == b":status")
                self._status[event.stream_id or 0] = int(status)
            elif isinstance(event, h2.events.DataReceived):
                sid = event.stream_id or 0
                self._streams[sid][1].append(event.data or b"")
                self._h2.acknowledge_received_data(event.flow_controlled_length or 0, sid)
            elif isinstance(event, h2.events.StreamEnded):
                sid = event.stream_id or 0
                future, body = self._streams.pop(sid)
                if not future.done():
                    future.set_result((self._status.pop(sid, 0), b"".join(body)))
            elif isinstance(event, h2.events.StreamReset):
                self._fail(event.stream_id or 0, f"stream reset ({event.error_code!r})")
            elif isinstance(event, h2.events.ConnectionTerminated):
                for sid in list(self._streams):
                    self._fail(sid, f"GOAWAY ({event.error_code!r})")
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        for sid in list(self._streams):
            self._fail(sid, "the connection closed")

    def _fail(self, sid: int, why: str) -> None:
        pending = self._streams.pop(sid, None)
        if pending is not None and not pending[0].done():
            pending[0].set_exception(ConnectionError(why))

    def _flush(self) -> None:
        self._flush_due = False
        out = self._h2.data_to_send()
        if out and self._transport is not None:
            self._transport.write(out)

    async def exchange(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> tuple[int, bytes]:
        """One request; its status and body."""
        sid = self._h2.get_next_available_stream_id()
        fields: list[tuple[bytes, bytes]] = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", self._authority),
            NeverIndexedHeaderTuple(b":path", target.encode()),
        ]
        fields.extend((k.lower().encode(), v.encode()) for k, v in headers.items())
        if body is not None:
            fields.append(NeverIndexedHeaderTuple(b"content-length", b"%d" % len(body)))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        self._streams[sid] = (future, [])
        self._h2.send_headers(sid, fields, end_stream=body is None)
        if body is not None:
            self._h2.send_data(sid, body, end_stream=True)
        if not self._flush_due:
            self._flush_due = True
            loop.call_soon(self._flush)
        return await future

    def close(self) -> None:
        if self._transport is not None:
            self._h2.close_connection()
            self._flush()
            self._transport.close()


async def connect(host: str, port: int, tls: ssl.SSLContext, *, authority: str) -> H2Connection:
    """A connection to ``host``:``port``; ``tls`` must offer ALPN ``h2`` (else: ``ValueError``)."""
    loop = asyncio.get_running_loop()
    transport, connection = await loop.create_connection(
        lambda: H2Connection(authority), host, port, ssl=tls, server_hostname=host
    )
    await connection.ready
    tls_object = transport.get_extra_info("ssl_object")
    if tls_object is None or tls_object.selected_alpn_protocol() != "h2":
        transport.close()
        raise ValueError(f"{host}:{port} did not agree to HTTP/2 (ALPN h2)")
    return connection
