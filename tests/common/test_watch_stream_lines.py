"""A watch stream cut into its events (``common.kube.watch.stream_lines``): lines split across
reads or sharing one, blank keep-alive lines dropped, a last line without its newline kept, and
an object larger than the HTTP client's line limit (128 KiB) delivered like any other — over a
real chunked HTTP reply read as the API-server client reads a watch."""

from __future__ import annotations

import json

import aiohttp
from aiohttp import web

from common.kube.watch import stream_lines
from tests.support.http_app import serving


async def _lines(*chunks: bytes) -> list[bytes]:
    pending = list(chunks)

    async def read() -> bytes:
        return pending.pop(0) if pending else b""

    return [line async for line in stream_lines(read)]


async def test_events_split_across_reads_or_sharing_one_come_out_whole() -> None:
    assert await _lines(b'{"a":1}\n{"b"', b':2}\n\n  \n{"c":', b"3", b"}\n") == [
        b'{"a":1}',
        b'{"b":2}',
        b'{"c":3}',
    ]


async def test_a_last_event_without_its_newline_is_kept_and_blank_tails_are_not() -> None:
    assert await _lines(b'{"a":1}\n{"b":2}') == [b'{"a":1}', b'{"b":2}']
    assert await _lines(b'{"a":1}\n', b"  ") == [b'{"a":1}']
    assert await _lines() == []


async def test_an_object_over_the_http_clients_line_limit_is_delivered() -> None:
    big = {"type": "ADDED", "object": {"metadata": {"annotations": {"a": "x" * 300_000}}}}
    events = [{"type": "ADDED", "object": {"n": 1}}, big, {"type": "DELETED", "object": {}}]

    async def watch(request: web.Request) -> web.StreamResponse:
        reply = web.StreamResponse()
        reply.enable_chunked_encoding()
        await reply.prepare(request)
        for event in events:
            data = json.dumps(event).encode() + b"\n"
            for i in range(0, len(data), 40_000):  # as a server flushes a large object
                await reply.write(data[i : i + 40_000])
        await reply.write_eof()
        return reply

    app = web.Application()
    app.router.add_get("/watch", watch)
    async with (
        serving(app) as url,
        aiohttp.ClientSession() as session,
        session.get(f"{url}/watch") as response,
    ):
        got = [json.loads(line) async for line in stream_lines(response.content.readany)]
    assert got == events
