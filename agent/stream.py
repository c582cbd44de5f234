"""The agent's end of the capacity stream (docs/design.md §3, docs/stream.md).

:class:`StreamClient` keeps one WebSocket to the coordinator's ``GET /v1/agents/stream`` open:
a full ``hello`` first (and after every reconnect), then a ``delta`` with the next ``seq``
whenever :meth:`StreamClient.publish` hands it a changed state, a ``heartbeat`` when nothing
changed for a while. The coordinator acks each frame; a frame unacknowledged past
``ack_timeout_s`` means the link is dead, so the client reconnects (and says hello again, which
subsumes every unacked delta). Reconnects back off exponentially with jitter.

The agent app runs it like this::

    client = StreamClient(url, node_name, agent_version=__version__)
    task = asyncio.create_task(client.run())
    client.publish(topology, allocations)   # after each discovery
    ...
    await client.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp

from common.model import NodeTopology
from common.wire import (
    MAX_FRAME_BYTES,
    Ack,
    CloseReason,
    ContainerAllocation,
    Delta,
    FrameError,
    Heartbeat,
    Hello,
    changed_gpus,
    decode_frame,
    encode,
)

log = logging.getLogger(__name__)

# Reasons a retry cannot fix quickly: wait the longest backoff before trying again.
_SLOW_RETRY = frozenset(
    {
        CloseReason.NODE_CONFLICT,
        CloseReason.UNAUTHORIZED,
        CloseReason.UNSUPPORTED_VERSION,
        CloseReason.UNKNOWN_NODE,
    }
)


@dataclass(frozen=True, kw_only=True)
class StreamSettings:
    heartbeat_interval_s: float = 5.0
    """Send a heartbeat when no other frame went out for this long."""
    ack_timeout_s: float = 15.0
    """Reconnect when a frame stays unacknowledged this long."""
    backoff_initial_s: float = 0.5
    """First reconnect delay (before jitter); doubles per failed attempt."""
    backoff_max_s: float = 30.0
    """Cap of the reconnect delay."""
    connect_timeout_s: float = 10.0
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra request headers (e.g. ``Authorization: Bearer …``)."""


class StreamState(enum.Enum):
    WAITING_FOR_STATE = "waiting-for-state"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BACKOFF = "backoff"
    CLOSED = "closed"


def backoff_delay(attempt: int, settings: StreamSettings, rng: random.Random) -> float:
    """Exponential backoff with "equal jitter": half the step fixed, half random."""
    step = min(settings.backoff_max_s, settings.backoff_initial_s * (2.0 ** min(attempt, 30)))
    return step / 2 + rng.uniform(0, step / 2)


@dataclass
class StreamStats:
    connects: int = 0
    hellos: int = 0
    deltas: int = 0
    heartbeats: int = 0
    acked_seq: int = -1
    last_close: str | None = None  # the coordinator's close message, e.g. "node-conflict: …"


class StreamClient:
    def __init__(
        self,
        url: str,
        node: str,
        *,
        agent_version: str,
        settings: StreamSettings | None = None,
        session: aiohttp.ClientSession | None = None,
        rng: random.Random | None = None,
        on_state: Callable[[StreamState], None] | None = None,
    ) -> None:
        self.url = url
        self.node = node
        self.agent_version = agent_version
        self.agent_id = uuid.uuid4().hex
        self.settings = settings or StreamSettings()
        self.stats = StreamStats()
        self._session = session
        self._own_session = session is None
        self._rng = rng or random.Random()
        self._on_state = on_state
        self._state = StreamState.WAITING_FOR_STATE
        self._topology: NodeTopology | None = None
        self._allocations: tuple[ContainerAllocation, ...] = ()
        self._wake = asyncio.Event()
        self._closing = False
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._seq = 0
        self._hello_seq = 1
        self._stopped = asyncio.Event()
        self._stopped.set()  # not running
        self.connected = asyncio.Event()
        """Set while a hello is acknowledged on the current connection."""

    # --- what the agent app calls ----------------------------------------------------------------

    @property
    def state(self) -> StreamState:
        return self._state

    def publish(
        self, topology: NodeTopology, allocations: tuple[ContainerAllocation, ...] = ()
    ) -> None:
        """Hand over the latest discovered state; the client sends what changed."""
        self._topology = topology
        self._allocations = tuple(allocations)
        self._wake.set()

    async def close(self) -> None:
        """Stop: close the connection (``agent-stopping``) and make :meth:`run` return."""
        self._closing = True
        self._wake.set()
        await self._stopped.wait()

    async def run(self) -> None:
        """Connect, stream, reconnect — until :meth:`close`."""
        session = self._session or aiohttp.ClientSession()
        self._stopped.clear()
        attempt = 0
        try:
            while not self._closing:
                if self._topology is None:
                    self._set_state(StreamState.WAITING_FOR_STATE)
                    await self._wake.wait()
                    self._wake.clear()
                    continue
                self._set_state(StreamState.CONNECTING)
                reason: CloseReason | None = None
                try:
                    reason, greeted = await self._connect_once(session)
                    if greeted:
                        attempt = 0
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    log.info("coordinator stream %s unavailable: %s", self.url, exc)
                except FrameError as exc:  # our own state can't be framed (too large)
                    log.error("cannot stream node %s: %s", self.node, exc)
                finally:
                    self.connected.clear()
                    self._ws = None
                if self._closing:
                    break
                delay = backoff_delay(attempt, self.settings, self._rng)
                if reason in _SLOW_RETRY:
                    delay = max(delay, self.settings.backoff_max_s)
                attempt += 1
                self._set_state(StreamState.BACKOFF)
                log.info("reconnecting to %s in %.2fs", self.url, delay)
                try:
                    async with asyncio.timeout(delay):
                        while not self._closing:
                            await self._wake.wait()
                            self._wake.clear()
                except TimeoutError:
                    pass
        finally:
            self._set_state(StreamState.CLOSED)
            if self._own_session:
                await session.close()
            self._stopped.set()

    # --- one connection --------------------------------------------------------------------------

    def _set_state(self, state: StreamState) -> None:
        if state is not self._state:
            self._state = state
            if self._on_state is not None:
                self._on_state(state)

    async def _connect_once(
        self, session: aiohttp.ClientSession
    ) -> tuple[CloseReason | None, bool]:
        """One connection's life; returns the close reason (if the coordinator gave one) and
        whether the hello was acknowledged."""
        async with session.ws_connect(
            self.url,
            headers=dict(self.settings.headers),
            max_msg_size=MAX_FRAME_BYTES,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=5.0),
            autoping=True,
        ) as ws:
            self._ws = ws
            self.stats.connects += 1
            self.stats.last_close = None
            greeted = False
            loop = asyncio.get_running_loop()
            sent_topology: NodeTopology | None = None
            sent_allocations: tuple[ContainerAllocation, ...] = ()
            unacked: dict[int, float] = {}  # seq -> when sent
            last_sent = loop.time()
            reader = asyncio.ensure_future(self._read_acks(ws, unacked))
            try:
                while not ws.closed and not reader.done() and not self._closing:
                    topology, allocations = self._topology, self._allocations
                    assert topology is not None
                    frame: Hello | Delta | Heartbeat | None = None
                    if sent_topology is None:
                        frame = self._hello(topology, allocations)
                    elif topology is not sent_topology or allocations != sent_allocations:
                        gpus = changed_gpus(sent_topology, topology)
                        if gpus is None:
                            frame = self._hello(topology, allocations)
                        elif gpus or allocations != sent_allocations:
                            self._seq += 1
                            frame = Delta(
                                seq=self._seq,
                                gpus=gpus,
                                allocations=(
                                    None if allocations == sent_allocations else allocations
                                ),
                            )
                        sent_topology = topology  # identical content: nothing to send
                    if frame is None and loop.time() - last_sent >= (
                        self.settings.heartbeat_interval_s
                    ):
                        frame = Heartbeat(seq=self._seq)
                    if frame is not None:
                        await self._send(ws, frame)
                        last_sent = now = loop.time()
                        # Heartbeats are acked too: an unanswered one means a dead link.
                        unacked.setdefault(self._seq, now)
                        sent_topology, sent_allocations = topology, allocations
                    if (
                        unacked
                        and loop.time() - min(unacked.values()) > self.settings.ack_timeout_s
                    ):
                        log.warning(
                            "no ack from %s for %.1fs; reconnecting",
                            self.url,
                            self.settings.ack_timeout_s,
                        )
                        break
                    greeted = greeted or self.connected.is_set()
                    if greeted:
                        self._set_state(StreamState.CONNECTED)
                    wait_s = self.settings.heartbeat_interval_s - (loop.time() - last_sent)
                    if unacked:
                        wait_s = min(
                            wait_s,
                            min(unacked.values()) + self.settings.ack_timeout_s - loop.time(),
                        )
                    try:
                        async with asyncio.timeout(max(wait_s, 0.0) + 0.001):
                            await self._wake.wait()
                    except TimeoutError:
                        pass
                    self._wake.clear()
            finally:
                if not reader.done():
                    reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await reader
                greeted = greeted or self.connected.is_set()
                if not ws.closed:
                    reason = CloseReason.AGENT_STOPPING if self._closing else CloseReason.INTERNAL
                    detail = "" if self._closing else "no ack in time"
                    await ws.close(code=reason.ws_code, message=reason.message(detail).encode())
            return CloseReason.from_message(self.stats.last_close), greeted

    def _hello(self, topology: NodeTopology, allocations: tuple[ContainerAllocation, ...]) -> Hello:
        self._seq += 1
        self._hello_seq = self._seq
        return Hello(
            node=self.node,
            agent_version=self.agent_version,
            agent_id=self.agent_id,
            seq=self._seq,
            topology=topology,
            allocations=allocations,
        )

    async def _send(
        self, ws: aiohttp.ClientWebSocketResponse, frame: Hello | Delta | Heartbeat
    ) -> None:
        try:
            data = encode(frame)
        except FrameError:
            log.error("state of node %s too large for one frame; not sent", self.node)
            raise
        await ws.send_bytes(data)
        if isinstance(frame, Hello):
            self.stats.hellos += 1
        elif isinstance(frame, Delta):
            self.stats.deltas += 1
        else:
            self.stats.heartbeats += 1

    async def _read_acks(
        self, ws: aiohttp.ClientWebSocketResponse, unacked: dict[int, float]
    ) -> None:
        try:
            while True:
                msg = await ws.receive()
                if msg.type == aiohttp.WSMsgType.CLOSE:
                    self.stats.last_close = str(msg.extra or "") or None
                    if self.stats.last_close:
                        log.warning("coordinator closed the stream: %s", self.stats.last_close)
                    break
                if msg.type != aiohttp.WSMsgType.BINARY:
                    if msg.type in (
                        aiohttp.WSMsgType.TEXT,
                        aiohttp.WSMsgType.PING,
                        aiohttp.WSMsgType.PONG,
                    ):
                        continue
                    break  # CLOSING / CLOSED / ERROR
                try:
                    frame = decode_frame(msg.data)
                except FrameError as exc:
                    log.warning("bad frame from coordinator: %s", exc)
                    await ws.close(
                        code=exc.reason.ws_code, message=exc.reason.message(exc.detail).encode()
                    )
                    break
                if isinstance(frame, Ack):
                    self.stats.acked_seq = frame.seq
                    for seq in [s for s in unacked if s <= frame.seq]:
                        del unacked[seq]
                    if frame.seq >= self._hello_seq:
                        self.connected.set()
        finally:
            self._wake.set()
