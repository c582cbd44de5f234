"""One agent stream's protocol state (coordinator.inventory.ingest), without a network: hello
first, deltas in strict seq order, heartbeats, one live stream per node, nothing applied from a
frame that is refused."""

from __future__ import annotations

import msgpack
import pytest

from common.wire import (
    Ack,
    CloseReason,
    Delta,
    FrameError,
    GpuState,
    Heartbeat,
    changed_gpus,
    decode_frame,
    encode,
)
from coordinator.inventory.ingest import AgentSession, SessionRegistry
from coordinator.inventory.store import Inventory
from tests.support.clock import ManualClock
from tests.support.stream_frames import hello, topology, with_gpu


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0.0)


@pytest.fixture
def inv(clock: ManualClock) -> Inventory:
    return Inventory(stale_ttl_s=5.0, clock=clock)


@pytest.fixture
def registry(inv: Inventory) -> SessionRegistry:
    return SessionRegistry(inv)


def _session(inv: Inventory, registry: SessionRegistry, **kw: object) -> AgentSession:
    return AgentSession(inv, registry, **kw)  # type: ignore[arg-type]


def _refused(session: AgentSession, data: bytes) -> FrameError:
    with pytest.raises(FrameError) as info:
        session.receive(data)
    return info.value


def _health(seq: int, index: int = 1, healthy: bool = False) -> bytes:
    states = changed_gpus(topology(), with_gpu(topology(), index, healthy=healthy))
    assert states is not None
    return encode(Delta(seq=seq, gpus=states))


def test_hello_then_deltas_are_acked_with_their_seq(
    inv: Inventory, registry: SessionRegistry
) -> None:
    s = _session(inv, registry)
    assert decode_frame(s.receive(encode(hello(seq=5)))) == Ack(seq=5)
    assert decode_frame(s.receive(_health(6))) == Ack(seq=6)
    assert decode_frame(s.receive(encode(Heartbeat(seq=6)))) == Ack(seq=6)
    state = inv.node("node-a")
    assert state is not None
    assert state.topology is not None
    assert state.topology.gpus[1].healthy is False
    assert state.seq == 6


@pytest.mark.parametrize(
    "first",
    [encode(Delta(seq=1)), encode(Heartbeat(seq=0))],
    ids=["delta", "heartbeat"],
)
def test_anything_before_hello_is_refused(
    inv: Inventory, registry: SessionRegistry, first: bytes
) -> None:
    err = _refused(_session(inv, registry), first)
    assert err.reason is CloseReason.HELLO_REQUIRED
    assert len(inv) == 0


@pytest.mark.parametrize("seq", [3, 5, 1], ids=["repeat", "gap", "backwards"])
def test_non_monotonic_seq_is_refused_and_not_applied(
    inv: Inventory, registry: SessionRegistry, seq: int
) -> None:
    s = _session(inv, registry)
    s.receive(encode(hello(seq=2)))
    s.receive(_health(3, index=0))
    before = inv.node("node-a")
    err = _refused(s, _health(seq, index=1))
    assert err.reason is CloseReason.SEQ_OUT_OF_ORDER
    assert inv.node("node-a") == before


def test_garbage_mid_stream_reaches_nothing(inv: Inventory, registry: SessionRegistry) -> None:
    s = _session(inv, registry)
    s.receive(encode(hello()))
    before = inv.node("node-a")
    for data in [
        b"\x93\x01\x02",
        msgpack.packb({"type": "delta", "version": 7, "seq": 1}),
        msgpack.packb({"type": "delta", "version": 1, "seq": 1, "gpus": [{"index": "zero"}]}),
        encode(Delta(seq=1, gpus=(GpuState(index=5, uuid="GPU-node-a-5", healthy=False),))),
    ]:
        with pytest.raises(FrameError):
            s.receive(data)
    assert inv.node("node-a") == before


def test_second_agent_claiming_a_live_node_is_refused(
    inv: Inventory, registry: SessionRegistry
) -> None:
    first = _session(inv, registry)
    first.receive(encode(hello(agent_id="agent-1")))
    intruder = _session(inv, registry)
    err = _refused(intruder, encode(hello(agent_id="agent-2", topology=topology(gpus=8))))
    assert err.reason is CloseReason.NODE_CONFLICT
    state = inv.node("node-a")
    assert state is not None
    assert state.agent_id == "agent-1"
    assert state.topology is not None
    assert len(state.topology.gpus) == 2
    assert registry.holder("node-a") is first


def test_same_agent_reconnecting_replaces_its_old_stream(
    inv: Inventory, registry: SessionRegistry
) -> None:
    closed: list[CloseReason] = []
    old = _session(inv, registry, on_evict=lambda reason, detail: closed.append(reason))
    old.receive(encode(hello(agent_id="agent-1")))
    new = _session(inv, registry)
    new.receive(encode(hello(agent_id="agent-1", seq=9)))
    assert closed == [CloseReason.REPLACED]
    assert registry.holder("node-a") is new
    assert _refused(old, encode(Heartbeat(seq=0))).reason is CloseReason.REPLACED
    old.end()  # the old connection finishing must not disconnect the node
    assert inv.node("node-a").connected  # type: ignore[union-attr]


def test_a_stale_node_can_be_taken_over_by_a_new_agent(
    inv: Inventory, registry: SessionRegistry, clock: ManualClock
) -> None:
    _session(inv, registry).receive(encode(hello(agent_id="agent-1")))
    clock.now += 6
    inv.sweep()
    new = _session(inv, registry)
    new.receive(encode(hello(agent_id="agent-2")))
    assert inv.node("node-a").agent_id == "agent-2"  # type: ignore[union-attr]
    assert not inv.node("node-a").stale  # type: ignore[union-attr]


def test_one_stream_reports_one_node(inv: Inventory, registry: SessionRegistry) -> None:
    s = _session(inv, registry)
    s.receive(encode(hello("node-a")))
    err = _refused(s, encode(hello("node-b")))
    assert err.reason is CloseReason.NODE_CONFLICT
    assert "node-b" not in inv


def test_credentials_bound_to_another_node_are_refused(
    inv: Inventory, registry: SessionRegistry
) -> None:
    err = _refused(_session(inv, registry, bound_node="node-b"), encode(hello("node-a")))
    assert err.reason is CloseReason.UNAUTHORIZED
    assert len(inv) == 0
    ok = _session(inv, registry, bound_node="node-a")
    assert decode_frame(ok.receive(encode(hello("node-a")))) == Ack(seq=0)


def test_end_of_stream_marks_the_node_disconnected(
    inv: Inventory, registry: SessionRegistry
) -> None:
    s = _session(inv, registry)
    s.receive(encode(hello()))
    s.end()
    assert not inv.node("node-a").connected  # type: ignore[union-attr]
    assert registry.holder("node-a") is None
