"""How long an agent stream may say nothing: a connection that sends no ``hello`` within
``helloTimeoutSeconds``, or nothing after it for ``streamIdleTimeoutSeconds``, is closed with
``timeout`` and its socket released (WebSocket pings extend neither); an agent that heartbeats is
never cut. The deadlines here are short (configured), not slept through."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aiohttp
import psutil
import pytest

from agent.stream import StreamClient, StreamSettings
from common.wire import Ack, decode_frame, encode
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.app.config.load import ConfigError, parse_config
from coordinator.app.config.sections import Config, CoordinatorSection
from coordinator.app.main import running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.inventory.store import Inventory
from tests.support.inventory_wait import until
from tests.support.polling import eventually
from tests.support.raw_ws import RawWebSocket
from tests.support.stream_frames import hello, topology

HELLO_S, IDLE_S = 1.0, 2.0
SHORT = Config(
    coordinator=CoordinatorSection(
        sweep_interval_s=3600, hello_timeout_s=HELLO_S, stream_idle_timeout_s=IDLE_S
    )
)


@pytest.fixture
def inv() -> Inventory:
    return Inventory(stale_ttl_s=30.0)


@pytest.fixture
async def coordinator(inv: Inventory) -> AsyncIterator[str]:
    async with running(wire(SHORT, MemoryBackend(MemoryCluster(inv)))) as url:
        yield url


async def _metric(url: str, line: str) -> float:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as resp:
        text = await resp.text()
    found = [row for row in text.splitlines() if row.startswith(line + " ")]
    return float(found[0].rsplit(" ", 1)[1]) if found else 0.0


def _server_sockets(url: str) -> int:
    """Accepted connections this process holds open on the coordinator's port (its fds)."""
    port = urlsplit(url).port
    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.laddr and c.laddr.port == port and c.status != psutil.CONN_LISTEN
    )


async def _released(url: str) -> None:
    await eventually(
        lambda: _server_sockets(url) == 0, what="the server's sockets released", timeout_s=60
    )
    assert await _metric(url, "topos_stream_connections") == 0


async def test_connections_that_never_say_hello_are_closed_and_their_sockets_released(
    coordinator: str,
) -> None:
    silent = [await RawWebSocket.open(coordinator) for _ in range(20)]
    await eventually(
        lambda: _counts(coordinator, "topos_stream_connections", 20), what="20 open streams"
    )
    for ws in silent[::2]:  # pings are no frames: they do not keep a connection open
        ws.send_ping()
    closes = await asyncio.gather(*(ws.read_close() for ws in silent))
    assert set(closes) == {(1008, f"timeout: no hello within {HELLO_S:g} s")}
    assert all(await asyncio.gather(*(ws.at_eof() for ws in silent)))
    await _released(coordinator)
    rejected = 'topos_stream_rejected_total{reason="timeout"}'
    assert await _metric(coordinator, rejected) == 20
    for ws in silent:
        await ws.close()


async def test_a_stream_silent_after_its_hello_is_closed_and_the_node_kept(
    coordinator: str, inv: Inventory
) -> None:
    ws = await RawWebSocket.open(coordinator)
    ws.send_binary(encode(hello("quiet")))
    opcode, ack = await ws.read_frame()
    assert (opcode, decode_frame(ack)) == (0x2, Ack(seq=0))
    ws.send_ping()
    assert await ws.read_close() == (1008, f"timeout: no frame for {IDLE_S:g} s")
    assert await ws.at_eof()
    await until(inv, lambda: not inv.node("quiet").connected)  # type: ignore[union-attr]
    assert inv.node("quiet").topology == topology("quiet")  # type: ignore[union-attr]
    await _released(coordinator)
    await ws.close()


async def test_an_agent_that_heartbeats_outlives_the_idle_timeout(
    coordinator: str, inv: Inventory
) -> None:
    client = StreamClient(
        coordinator.replace("http://", "ws://") + "/v1/agents/stream",
        "busy",
        agent_version="test",
        settings=StreamSettings(heartbeat_interval_s=0.2),
    )
    client.publish(topology("busy"))
    task = asyncio.create_task(client.run())
    beats = 'topos_stream_frames_total{type="heartbeat"}'
    # More heartbeats than fit in two idle timeouts: the stream lived past them.
    await eventually(
        lambda: _above(coordinator, beats, 2 * IDLE_S / 0.2),
        what="20 heartbeats",
        timeout_s=60,
        interval_s=0.2,
    )
    assert client.stats.connects == 1
    assert inv.node("busy").connected  # type: ignore[union-attr]
    await client.close()
    await task


async def _above(url: str, line: str, count: float) -> bool:
    return await _metric(url, line) >= count


async def _counts(url: str, line: str, count: float) -> bool:
    return await _metric(url, line) == count


@pytest.mark.parametrize("key", ["helloTimeoutSeconds", "streamIdleTimeoutSeconds"])
def test_a_timeout_that_is_not_positive_is_refused_naming_the_key(key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_config({"coordinator": {key: 0}})
