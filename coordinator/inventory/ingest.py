"""The coordinator's side of one agent stream, as a transport-free state machine.

:class:`AgentSession` takes raw frames (bytes) in order and either returns the bytes of the
``ack`` to send back, or raises :class:`~common.wire.FrameError` — after which the caller closes
the connection with ``error.reason`` and discards the session. Nothing reaches the inventory unless
the frame decoded, fits the protocol state and fits the node's reported topology.

:class:`SessionRegistry` enforces one live stream per node: a reconnect by the same agent process
(same ``agent_id``) replaces the old stream; a different agent claiming a node whose agent is still
alive is refused with ``node-conflict``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from common.wire import (
    Ack,
    CloseReason,
    Delta,
    FrameError,
    Heartbeat,
    Hello,
    decode_agent_frame,
    encode,
)
from coordinator.inventory.store import Inventory

log = logging.getLogger(__name__)

CloseCallback = Callable[[CloseReason, str], None]


@dataclass(eq=False, slots=True)
class _Claim:
    agent_id: str
    session: AgentSession


class SessionRegistry:
    """Which session currently speaks for each node."""

    def __init__(self, inventory: Inventory) -> None:
        self._inventory = inventory
        self._claims: dict[str, _Claim] = {}

    def __len__(self) -> int:
        return len(self._claims)

    def holder(self, node: str) -> AgentSession | None:
        claim = self._claims.get(node)
        return None if claim is None else claim.session

    def claim(self, node: str, agent_id: str, session: AgentSession) -> None:
        current = self._claims.get(node)
        if current is not None and current.session is not session:
            same_agent = current.agent_id == agent_id
            state = self._inventory.node(node)
            silent = state is not None and state.stale
            if not (same_agent or silent):
                raise FrameError(
                    CloseReason.NODE_CONFLICT,
                    f"node {node} is already reported by another agent",
                )
            log.info("stream for node %s replaced by a new connection", node)
            current.session.evict(CloseReason.REPLACED, "a newer connection reports this node")
        self._claims[node] = _Claim(agent_id, session)

    def release(self, node: str, session: AgentSession) -> None:
        current = self._claims.get(node)
        if current is not None and current.session is session:
            del self._claims[node]

    def evict(self, node: str, reason: CloseReason, detail: str) -> None:
        """Close the stream that reports ``node``, if any."""
        claim = self._claims.pop(node, None)
        if claim is not None:
            claim.session.evict(reason, detail)

    def close_all(self, reason: CloseReason, detail: str) -> None:
        for claim in list(self._claims.values()):
            claim.session.evict(reason, detail)


class AgentSession:
    """One connection's protocol state."""

    def __init__(
        self,
        inventory: Inventory,
        registry: SessionRegistry,
        *,
        bound_node: str | None = None,
        on_evict: CloseCallback | None = None,
    ) -> None:
        """``bound_node``: the node the caller's credentials allow (``None``: any node).
        ``on_evict``: how to close this connection when another one replaces it."""
        self._inventory = inventory
        self._registry = registry
        self._bound_node = bound_node
        self._on_evict = on_evict
        self.node: str | None = None
        self.agent_id: str | None = None
        self.last_seq = -1
        self.frames = 0
        self.last_type = ""
        self.evicted = False

    def receive(self, data: bytes) -> bytes:
        """Apply one frame; returns the encoded ``ack`` to send. Raises ``FrameError``."""
        if self.evicted:
            raise FrameError(CloseReason.REPLACED, "a newer connection reports this node")
        frame = decode_agent_frame(data)
        if isinstance(frame, Hello):
            self._hello(frame)
        elif isinstance(frame, Delta):
            self._delta(frame)
        else:
            self._heartbeat(frame)
        self.frames += 1
        self.last_type = frame.__struct_config__.tag  # type: ignore[assignment]
        return encode(Ack(seq=self.last_seq))

    def _hello(self, frame: Hello) -> None:
        if self._bound_node is not None and frame.node != self._bound_node:
            raise FrameError(
                CloseReason.UNAUTHORIZED,
                f"credentials are bound to node {self._bound_node}, not {frame.node}",
            )
        if self.node is not None and frame.node != self.node:
            raise FrameError(
                CloseReason.NODE_CONFLICT,
                f"this stream reports node {self.node}; it cannot switch to {frame.node}",
            )
        if self.agent_id is not None and frame.agent_id != self.agent_id:
            raise FrameError(CloseReason.NODE_CONFLICT, "agent_id changed within one stream")
        self._registry.claim(frame.node, frame.agent_id, self)
        self.node, self.agent_id = frame.node, frame.agent_id
        self._inventory.apply_hello(
            frame.node,
            agent_id=frame.agent_id,
            agent_version=frame.agent_version,
            seq=frame.seq,
            topology=frame.topology,
            allocations=frame.allocations,
        )
        self.last_seq = frame.seq

    def _delta(self, frame: Delta) -> None:
        if self.node is None:
            raise FrameError(CloseReason.HELLO_REQUIRED, "delta before hello")
        if frame.seq != self.last_seq + 1:
            raise FrameError(
                CloseReason.SEQ_OUT_OF_ORDER,
                f"delta seq {frame.seq} after {self.last_seq}; expected {self.last_seq + 1}",
            )
        self._inventory.apply_delta(
            self.node, seq=frame.seq, gpus=frame.gpus, allocations=frame.allocations
        )
        self.last_seq = frame.seq

    def _heartbeat(self, frame: Heartbeat) -> None:
        if self.node is None:
            raise FrameError(CloseReason.HELLO_REQUIRED, "heartbeat before hello")
        if frame.seq != self.last_seq:
            raise FrameError(
                CloseReason.SEQ_OUT_OF_ORDER,
                f"heartbeat says last seq {frame.seq}; applied {self.last_seq}",
            )
        self._inventory.touch(self.node)

    def evict(self, reason: CloseReason, detail: str) -> None:
        """Another connection took over (or the coordinator is stopping): close this one."""
        self.evicted = True
        if self._on_evict is not None:
            self._on_evict(reason, detail)

    def end(self) -> None:
        """The connection is gone: release the node (unless already replaced)."""
        if self.node is None or self.agent_id is None:
            return
        if self._registry.holder(self.node) is self:
            self._registry.release(self.node, self)
            self._inventory.agent_disconnected(self.node, self.agent_id)
