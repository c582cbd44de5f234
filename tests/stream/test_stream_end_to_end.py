"""The agent's StreamClient against a real coordinator app on loopback (in-memory inventory):
hello and deltas reach the inventory, a stopped agent's node goes stale and recovers, a coordinator
restart makes the client reconnect with a fresh hello, and bad streams are closed with a reason
without disturbing the good ones."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import aiohttp
import msgpack
import pytest

from agent.stream import StreamClient, StreamSettings, StreamState
from common.wire import MAX_FRAME_BYTES, Ack, CloseReason, Heartbeat, decode_frame, encode
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.app.config.sections import Config, CoordinatorSection
from coordinator.app.main import running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.inventory.state import KubeNode
from coordinator.inventory.store import Inventory
from tests.support.clock import ManualClock
from tests.support.inventory_wait import until
from tests.support.stream_frames import hello, mig_layout, topology, with_gpu

FAST = StreamSettings(heartbeat_interval_s=0.2, backoff_initial_s=0.05, backoff_max_s=0.2)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(100.0)


# A sweep interval far longer than any test: tests call inv.sweep() themselves.
NO_SWEEPS = Config(coordinator=CoordinatorSection(sweep_interval_s=3600))


@pytest.fixture
def inv(clock: ManualClock) -> Inventory:
    return Inventory(stale_ttl_s=30.0, clock=clock)


@pytest.fixture
async def coordinator(inv: Inventory) -> AsyncIterator[str]:
    async with running(wire(NO_SWEEPS, MemoryBackend(MemoryCluster(inv)))) as url:
        yield url


def _ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/v1/agents/stream"


def _backoff_event() -> tuple[asyncio.Event, Callable[[StreamState], None]]:
    event = asyncio.Event()

    def on_state(state: StreamState) -> None:
        if state is StreamState.BACKOFF:
            event.set()

    return event, on_state


async def _start(url: str, node: str, **kw: object) -> tuple[StreamClient, asyncio.Task[None]]:
    client = StreamClient(
        _ws_url(url),
        node,
        agent_version="test",
        settings=FAST,
        on_state=kw.get("on_state"),  # type: ignore[arg-type]
    )
    client.publish(kw.get("topo") or topology(node))  # type: ignore[arg-type]
    task = asyncio.create_task(client.run())
    async with asyncio.timeout(60):
        await client.connected.wait()
    return client, task


async def _stop(client: StreamClient, task: asyncio.Task[None]) -> None:
    await client.close()
    await task


async def test_two_agents_show_up_in_the_inventory_api(coordinator: str, inv: Inventory) -> None:
    a = await _start(coordinator, "node-a", topo=topology("node-a", gpus=8))
    b = await _start(coordinator, "node-b", topo=topology("node-b", gpus=4, nvlink=False))
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{coordinator}/v1/nodes") as resp:
            listing = await resp.json()
        async with http.get(f"{coordinator}/v1/nodes/node-b") as resp:
            node_b = await resp.json()
    assert [(n["name"], n["gpus"], n["connected"]) for n in listing["items"]] == [
        ("node-a", 8, True),
        ("node-b", 4, True),
    ]
    assert node_b["topology"]["links"][0][3] == "SYS"
    assert node_b["stale"] is False
    for client in (a, b):
        await _stop(*client)


async def test_gpu_health_and_mig_layout_changes_follow_as_deltas(
    coordinator: str, inv: Inventory
) -> None:
    client, task = await _start(coordinator, "node-a")
    topo = topology("node-a")
    client.publish(with_gpu(topo, 1, healthy=False, health_reason="XID 79"))
    await until(inv, lambda: inv.node("node-a").free["nvidia.com/gpu"] == 1)  # type: ignore[union-attr]
    client.publish(mig_layout(with_gpu(topo, 1, healthy=False), 0, ["3g.40gb", "3g.40gb"]))
    await until(inv, lambda: "nvidia.com/mig-3g.40gb" in inv.node("node-a").free)  # type: ignore[union-attr]
    state = inv.node("node-a")
    assert state is not None
    assert state.free["nvidia.com/mig-3g.40gb"] == 2
    assert client.stats.hellos == 1
    assert client.stats.deltas == 2
    await _stop(client, task)


async def test_a_new_gpu_is_sent_as_a_new_hello(coordinator: str, inv: Inventory) -> None:
    client, task = await _start(coordinator, "node-a")
    client.publish(topology("node-a", gpus=4))
    await until(inv, lambda: len(inv.node("node-a").gpu_use) == 4)  # type: ignore[union-attr]
    assert client.stats.hellos == 2
    await _stop(client, task)


async def test_stopped_agent_goes_stale_and_recovers_on_restart(
    coordinator: str, inv: Inventory, clock: ManualClock
) -> None:
    inv.upsert_node(KubeNode(name="node-a"))
    client, task = await _start(coordinator, "node-a")
    await _stop(client, task)
    await until(inv, lambda: not inv.node("node-a").connected)  # type: ignore[union-attr]
    clock.now += 31
    assert inv.sweep() == ["node-a"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{coordinator}/v1/nodes/node-a") as resp:
            body = await resp.json()
        assert body["stale"] is True
        assert body["schedulable"] is False
        async with http.get(f"{coordinator}/v1/nodes?stale=true") as resp:
            assert [n["name"] for n in (await resp.json())["items"]] == ["node-a"]
    client, task = await _start(coordinator, "node-a")
    state = inv.node("node-a")
    assert state is not None
    assert not state.stale
    assert state.schedulable
    await _stop(client, task)


async def test_client_reconnects_with_a_full_hello_after_coordinator_restart(
    inv: Inventory,
) -> None:
    app = wire(NO_SWEEPS, MemoryBackend(MemoryCluster(inv)))
    backing_off, on_state = _backoff_event()
    async with running(app) as url:
        port = int(url.rsplit(":", 1)[1])
        client, task = await _start(url, "node-a", on_state=on_state)
    # The coordinator is gone: the client backs off and retries.
    async with asyncio.timeout(60):
        await backing_off.wait()
    fresh = Inventory(stale_ttl_s=30)
    async with running(wire(NO_SWEEPS, MemoryBackend(MemoryCluster(fresh))), port=port):
        await until(fresh, lambda: "node-a" in fresh)
        async with asyncio.timeout(60):
            await client.connected.wait()
    assert client.stats.connects >= 2
    assert client.stats.hellos >= 2
    assert fresh.node("node-a").topology == topology("node-a")  # type: ignore[union-attr]
    await _stop(client, task)


# --- bad streams over the real socket ------------------------------------------------------------


async def _raw_close(url: str, *frames: bytes | str) -> tuple[int | None, str]:
    """Send frames on a raw WebSocket; return the close code and message the server sent."""
    async with aiohttp.ClientSession() as http, http.ws_connect(_ws_url(url), max_msg_size=0) as ws:
        try:
            for frame in frames:
                if isinstance(frame, str):
                    await ws.send_str(frame)
                else:
                    await ws.send_bytes(frame)
        except ConnectionError:  # the server hung up while we were still sending
            pass
        while True:
            msg = await ws.receive(timeout=60)
            if msg.type == aiohttp.WSMsgType.CLOSE:
                return msg.data, str(msg.extra)
            if msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                return ws.close_code, ""


@pytest.mark.parametrize(
    ("frames", "code", "slug"),
    [
        ([b"\xc1\xc1"], 1007, "malformed"),
        (['{"type": "hello"}'], 1007, "malformed"),
        ([msgpack.packb({"type": "hello", "version": 3})], 1002, "unsupported-version"),
        ([b"\x00" * (MAX_FRAME_BYTES + 10)], 1009, "oversized"),
        ([encode(Heartbeat(seq=0))], 1002, "hello-required"),
        ([encode(hello("node-z", seq=4)), encode(Heartbeat(seq=9))], 1002, "seq-out-of-order"),
        ([encode(Ack(seq=1))], 1002, "unexpected-frame"),
    ],
    ids=["garbage", "text", "version", "oversized", "before-hello", "seq", "ack-from-agent"],
)
async def test_bad_stream_is_closed_with_a_reason_and_others_carry_on(
    coordinator: str, inv: Inventory, frames: list[bytes | str], code: int, slug: str
) -> None:
    client, task = await _start(coordinator, "node-a")
    got_code, message = await _raw_close(coordinator, *frames)
    assert got_code == code
    assert CloseReason.from_message(message) is not None
    assert message.startswith(slug)
    # The good agent's stream is untouched: a change still arrives.
    client.publish(with_gpu(topology("node-a"), 0, healthy=False))
    await until(inv, lambda: inv.node("node-a").free["nvidia.com/gpu"] == 1)  # type: ignore[union-attr]
    assert inv.names() == (["node-a", "node-z"] if slug == "seq-out-of-order" else ["node-a"])
    await _stop(client, task)


async def test_huge_frame_beyond_transport_limit_ends_only_that_connection(
    coordinator: str, inv: Inventory
) -> None:
    code, _ = await _raw_close(coordinator, b"\x00" * (5 * MAX_FRAME_BYTES))
    assert code in (1009, 1006, None)  # too big, or the hang-up reached us mid-send
    client, task = await _start(coordinator, "node-a")
    assert inv.node("node-a").connected  # type: ignore[union-attr]
    await _stop(client, task)


async def test_agent_claiming_a_connected_node_is_refused(coordinator: str, inv: Inventory) -> None:
    client, task = await _start(coordinator, "node-a")
    code, message = await _raw_close(
        coordinator, encode(hello("node-a", agent_id="impostor", topology=topology(gpus=8)))
    )
    assert code == 1008
    assert message.startswith("node-conflict")
    assert inv.node("node-a").agent_id == client.agent_id  # type: ignore[union-attr]
    assert len(inv.node("node-a").gpu_use) == 2  # type: ignore[union-attr]
    await _stop(client, task)


async def test_refused_client_reports_the_reason_and_keeps_retrying(
    coordinator: str, inv: Inventory
) -> None:
    owner, owner_task = await _start(coordinator, "node-a")
    backing_off, on_state = _backoff_event()
    rival = StreamClient(
        _ws_url(coordinator), "node-a", agent_version="test", settings=FAST, on_state=on_state
    )
    rival.publish(topology("node-a"))
    rival_task = asyncio.create_task(rival.run())
    async with asyncio.timeout(60):
        await backing_off.wait()
    assert CloseReason.from_message(rival.stats.last_close) is CloseReason.NODE_CONFLICT
    assert not rival.connected.is_set()
    assert inv.node("node-a").agent_id == owner.agent_id  # type: ignore[union-attr]
    await _stop(rival, rival_task)
    await _stop(owner, owner_task)


async def test_acks_name_the_last_applied_seq(coordinator: str) -> None:
    async with aiohttp.ClientSession() as http, http.ws_connect(_ws_url(coordinator)) as ws:
        await ws.send_bytes(encode(hello("node-q", seq=41)))
        assert decode_frame(await ws.receive_bytes(timeout=60)) == Ack(seq=41)
        await ws.send_bytes(encode(Heartbeat(seq=41)))
        assert decode_frame(await ws.receive_bytes(timeout=60)) == Ack(seq=41)


async def test_same_agent_reconnecting_closes_its_old_connection_as_replaced(
    coordinator: str, inv: Inventory
) -> None:
    async with aiohttp.ClientSession() as http:
        old = await http.ws_connect(_ws_url(coordinator))
        await old.send_bytes(encode(hello("node-r", agent_id="same")))
        assert decode_frame(await old.receive_bytes(timeout=60)) == Ack(seq=0)
        new = await http.ws_connect(_ws_url(coordinator))
        await new.send_bytes(encode(hello("node-r", agent_id="same", seq=7)))
        assert decode_frame(await new.receive_bytes(timeout=60)) == Ack(seq=7)
        msg = await old.receive(timeout=60)
        assert msg.type == aiohttp.WSMsgType.CLOSE
        assert str(msg.extra).startswith("replaced")
        await new.send_bytes(encode(Heartbeat(seq=7)))
        assert decode_frame(await new.receive_bytes(timeout=60)) == Ack(seq=7)
        assert inv.node("node-r").seq == 7  # type: ignore[union-attr]
        assert inv.node("node-r").connected  # type: ignore[union-attr]
        await old.close()
        await new.close()
