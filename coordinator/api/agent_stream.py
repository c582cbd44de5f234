"""``GET /v1/agents/stream``: the capacity stream's server end (docs/design.md §3, docs/stream.md).

The WebSocket carries binary MessagePack frames (``common.wire``). Each applied frame is answered
with an ``ack``; a frame that can't be applied closes *this* connection with a close code and a
``"<reason>: <detail>"`` message, and nothing of it reaches the inventory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

from aiohttp import WSCloseCode, WSMsgType, web

from common.wire import MAX_FRAME_BYTES, CloseReason, FrameError
from coordinator.api.keys import AGENT_AUTH, INVENTORY, METRICS, SESSIONS, STREAM_TIMEOUTS
from coordinator.api.routing import Route
from coordinator.inventory.ingest import AgentSession

log = logging.getLogger(__name__)

# aiohttp drops anything beyond this itself (close 1009, no reason text); frames between
# MAX_FRAME_BYTES and this get our own "oversized" reason.
_TRANSPORT_LIMIT: Final = 4 * MAX_FRAME_BYTES
_PING_INTERVAL_S: Final = 20.0


async def agent_stream(request: web.Request) -> web.StreamResponse:
    bound_node = await request.app[AGENT_AUTH](request)  # raises 401/403 before the upgrade
    # WebSocket pings find agents whose TCP connection died silently (no FIN), so their claim on
    # the node is released; staleness itself comes from the inventory's TTL.
    ws = web.WebSocketResponse(
        max_msg_size=_TRANSPORT_LIMIT, autoping=True, heartbeat=_PING_INTERVAL_S
    )
    await ws.prepare(request)
    metrics = request.app[METRICS]
    metrics.connections.inc()
    pending_close: list[asyncio.Task[bool]] = []

    def evict(reason: CloseReason, detail: str) -> None:
        pending_close.append(
            asyncio.ensure_future(
                ws.close(code=reason.ws_code, message=reason.message(detail).encode())
            )
        )

    session = AgentSession(
        request.app[INVENTORY], request.app[SESSIONS], bound_node=bound_node, on_evict=evict
    )
    try:
        ended = await _serve(ws, session, request)
    except ConnectionResetError:  # the peer hung up while we answered (an ack, a pong)
        ended = "the agent hung up"
    finally:
        metrics.connections.dec()
        session.end()
        for task in pending_close:
            await asyncio.shield(task)
        if not ws.closed:
            await ws.close()
    if ended:
        log.info(
            "agent stream from %s (node %s) closed: %s", request.remote, session.node or "-", ended
        )
    return ws


async def _serve(ws: web.WebSocketResponse, session: AgentSession, request: web.Request) -> str:
    """Apply frames until the stream ends; returns why, for the log ("" when already logged)."""
    metrics, timeouts = request.app[METRICS], request.app[STREAM_TIMEOUTS]
    loop = asyncio.get_running_loop()
    # Absolute deadlines: WebSocket pings and pongs are no frames and extend nothing.
    deadline = loop.time() + timeouts.hello_s
    while not ws.closed:
        try:
            async with asyncio.timeout_at(deadline):
                msg = await ws.receive()
        except TimeoutError:
            if session.node is None:
                detail = f"no hello within {timeouts.hello_s:g} s"
            else:
                detail = f"no frame for {timeouts.idle_s:g} s"
            await _reject(ws, metrics_reason=CloseReason.TIMEOUT, detail=detail, request=request)
            return detail
        if msg.type == WSMsgType.BINARY:
            started = time.perf_counter()
            try:
                ack = session.receive(msg.data)
            except FrameError as exc:
                await _reject(ws, metrics_reason=exc.reason, detail=exc.detail, request=request)
                log.warning(
                    "closed agent stream from %s (node %s): %s", request.remote, session.node, exc
                )
                return ""
            metrics.ingest_seconds.observe(time.perf_counter() - started)
            metrics.frames.labels(session.last_type).inc()
            deadline = loop.time() + timeouts.idle_s
            await ws.send_bytes(ack)
        elif msg.type == WSMsgType.TEXT:
            await _reject(
                ws,
                metrics_reason=CloseReason.MALFORMED,
                detail="text frame; frames are binary MessagePack",
                request=request,
            )
            return "text frame"
        elif msg.type == WSMsgType.ERROR:
            if ws.close_code == WSCloseCode.MESSAGE_TOO_BIG:
                metrics.rejected.labels(CloseReason.OVERSIZED.slug).inc()
                return "oversized frame"
            return f"transport error: {msg.data}"
        else:  # CLOSE / CLOSING / CLOSED
            break
    return f"closed by the agent (code {ws.close_code})"


async def _reject(
    ws: web.WebSocketResponse, *, metrics_reason: CloseReason, detail: str, request: web.Request
) -> None:
    request.app[METRICS].rejected.labels(metrics_reason.slug).inc()
    await ws.close(code=metrics_reason.ws_code, message=metrics_reason.message(detail).encode())


ROUTES = (
    Route(
        "GET",
        "/v1/agents/stream",
        agent_stream,
        "Agent capacity stream: WebSocket upgrade, binary MessagePack frames (docs/stream.md)",
        "agents",
        errors={401: "missing or invalid token", 403: "token not allowed to report"},
        response_type="application/msgpack",
    ),
)
