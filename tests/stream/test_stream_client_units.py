"""StreamClient behaviour against minimal WebSocket servers the tests control: reconnect when acks
stop coming, jittered exponential backoff, no frames before there is a state to report."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer

from agent.stream import StreamClient, StreamSettings, StreamState, backoff_delay
from common.wire import Ack, Hello, decode_agent_frame, encode
from tests.support.stream_frames import topology

MakeServer = Callable[[web.Application], Awaitable[TestServer]]


def test_backoff_grows_exponentially_with_jitter_and_a_cap() -> None:
    settings = StreamSettings(backoff_initial_s=0.5, backoff_max_s=30.0)
    rng = random.Random(7)
    for attempt in range(12):
        step = min(30.0, 0.5 * 2**attempt)
        delays = [backoff_delay(attempt, settings, rng) for _ in range(50)]
        assert all(step / 2 <= d <= step for d in delays)
        assert len(set(delays)) > 1  # jittered, so agents don't reconnect in lockstep
    assert backoff_delay(500, settings, rng) <= 30.0


async def test_silent_coordinator_makes_the_client_reconnect_with_a_new_hello(
    aiohttp_server: MakeServer,
) -> None:
    hellos: list[Hello] = []
    second_hello = asyncio.Event()

    async def never_acks_after_hello(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            if msg.type != WSMsgType.BINARY:
                break
            frame = decode_agent_frame(msg.data)
            if isinstance(frame, Hello):
                hellos.append(frame)
                if len(hellos) == 1:
                    await ws.send_bytes(encode(Ack(seq=frame.seq)))
                else:
                    second_hello.set()
            # deltas and heartbeats are swallowed: no ack ever comes
        return ws

    app = web.Application()
    app.router.add_get("/v1/agents/stream", never_acks_after_hello)
    server = await aiohttp_server(app)
    settings = StreamSettings(
        heartbeat_interval_s=0.05, ack_timeout_s=0.3, backoff_initial_s=0.01, backoff_max_s=0.02
    )
    client = StreamClient(
        str(server.make_url("/v1/agents/stream")).replace("http", "ws"),
        "node-a",
        agent_version="test",
        settings=settings,
    )
    client.publish(topology())
    task = asyncio.create_task(client.run())
    async with asyncio.timeout(60):
        await second_hello.wait()
    await client.close()
    await task
    assert client.stats.connects >= 2
    assert hellos[1].agent_id == hellos[0].agent_id
    assert hellos[1].seq > hellos[0].seq
    assert client.state is StreamState.CLOSED


async def test_nothing_is_sent_before_the_first_state(aiohttp_server: MakeServer) -> None:
    seen = asyncio.Event()

    async def handler(request: web.Request) -> web.WebSocketResponse:
        seen.set()
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.close()
        return ws

    app = web.Application()
    app.router.add_get("/v1/agents/stream", handler)
    server = await aiohttp_server(app)
    states: list[StreamState] = []
    client = StreamClient(
        str(server.make_url("/v1/agents/stream")).replace("http", "ws"),
        "node-a",
        agent_version="test",
        on_state=states.append,
    )
    task = asyncio.create_task(client.run())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert client.state is StreamState.WAITING_FOR_STATE
    assert not seen.is_set()
    await client.close()
    await task
    assert states[-1] is StreamState.CLOSED
