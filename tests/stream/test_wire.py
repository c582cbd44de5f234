"""The stream's frame codec (common.wire): MessagePack maps with a version, validated on decode,
one FrameError with a close reason for every kind of garbage; delta computation and application."""

from __future__ import annotations

import msgpack
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.wire import (
    MAX_FRAME_BYTES,
    WIRE_VERSION,
    Ack,
    CloseReason,
    Delta,
    FrameError,
    Heartbeat,
    Hello,
    apply_gpu_states,
    changed_gpus,
    decode_agent_frame,
    decode_frame,
    encode,
)
from tests.support.stream_frames import allocation, hello, mig_layout, topology, with_gpu


def _raw(frame: object) -> dict[str, object]:
    out = msgpack.unpackb(encode(frame), raw=False)  # type: ignore[arg-type]
    assert isinstance(out, dict)
    return out


def _reason(data: bytes) -> CloseReason:
    with pytest.raises(FrameError) as info:
        decode_agent_frame(data)
    return info.value.reason


def test_every_frame_is_a_msgpack_map_with_type_and_version() -> None:
    frames = [hello(), Delta(seq=1), Heartbeat(seq=3), Ack(seq=3)]
    for frame in frames:
        raw = _raw(frame)
        assert raw["version"] == WIRE_VERSION
        assert raw["type"] in {"hello", "delta", "heartbeat", "ack"}
        assert decode_frame(encode(frame)) == frame


def test_hello_round_trips_topology_and_allocations() -> None:
    h = hello(allocations=(allocation("train-0", "GPU-node-a-0"),))
    back = decode_agent_frame(encode(h))
    assert back == h
    assert isinstance(back, Hello)
    assert back.topology.gpus[1].uuid == "GPU-node-a-1"


def test_frames_from_an_independent_msgpack_encoder_decode() -> None:
    data = msgpack.packb({"type": "heartbeat", "version": 1, "seq": 7, "future_field": [1, 2]})
    assert decode_agent_frame(data) == Heartbeat(seq=7)


@pytest.mark.parametrize(
    ("payload", "reason", "words"),
    [
        (b"\xc1", CloseReason.MALFORMED, "MessagePack"),
        (b"", CloseReason.MALFORMED, "MessagePack"),
        (msgpack.packb([1, 2, 3]), CloseReason.MALFORMED, "not a frame"),
        (msgpack.packb({"type": "heartbeat", "seq": 1}), CloseReason.MALFORMED, "version"),
        (
            msgpack.packb({"type": "heartbeat", "version": 2, "seq": 1}),
            CloseReason.UNSUPPORTED_VERSION,
            "version 2",
        ),
        (msgpack.packb({"type": "hello", "version": 99}), CloseReason.UNSUPPORTED_VERSION, "99"),
        (msgpack.packb({"type": "gossip", "version": 1}), CloseReason.UNEXPECTED_FRAME, "gossip"),
        (
            msgpack.packb({"type": "ack", "version": 1, "seq": 1}),
            CloseReason.UNEXPECTED_FRAME,
            "ack",
        ),
        (msgpack.packb({"type": "delta", "version": 1, "seq": 0}), CloseReason.MALFORMED, "seq"),
        (msgpack.packb({"type": "delta", "version": 1, "seq": "1"}), CloseReason.MALFORMED, "seq"),
        (
            msgpack.packb({"type": "delta", "version": 1, "seq": 2**64 - 1}),
            CloseReason.MALFORMED,
            "seq",
        ),
    ],
)
def test_garbage_is_one_frame_error_with_a_reason(
    payload: bytes, reason: CloseReason, words: str
) -> None:
    with pytest.raises(FrameError) as info:
        decode_agent_frame(payload)
    assert info.value.reason is reason
    assert words in str(info.value)


def test_hello_with_bad_node_name_or_bad_matrix_is_malformed() -> None:
    good = msgspec.to_builtins(hello())
    bad_name = dict(good, node="Not_A_Node!")
    assert _reason(msgpack.packb(bad_name)) is CloseReason.MALFORMED
    topo = dict(good["topology"], links=[["X", "NV12"], ["PIX", "X"]])  # asymmetric
    with pytest.raises(FrameError) as info:
        decode_agent_frame(msgpack.packb(dict(good, topology=topo)))
    assert info.value.reason is CloseReason.MALFORMED
    assert "symmetric" in str(info.value)


def test_oversized_frames_are_refused_both_ways() -> None:
    assert _reason(b"\x00" * (MAX_FRAME_BYTES + 1)) is CloseReason.OVERSIZED
    huge = hello(allocations=tuple(allocation(f"pod-{i}", "GPU-" + "x" * 250) for i in range(4096)))
    with pytest.raises(FrameError) as info:
        encode(huge)
    assert info.value.reason is CloseReason.OVERSIZED


def test_close_message_fits_a_close_frame_and_parses_back() -> None:
    message = CloseReason.NODE_CONFLICT.message("é" * 200)
    assert len(message.encode()) <= 123
    assert CloseReason.from_message(message) is CloseReason.NODE_CONFLICT
    assert CloseReason.from_message("something else") is None


# --- deltas ------------------------------------------------------------------------------------


def test_changed_gpus_names_only_what_changed() -> None:
    old = topology()
    new = with_gpu(old, 1, healthy=False, health_reason="XID 79")
    states = changed_gpus(old, new)
    assert states is not None
    assert [s.index for s in states] == [1]
    assert states[0].healthy is False
    assert apply_gpu_states(old, states) == new
    assert changed_gpus(old, old) == ()


def test_mig_relayout_is_a_delta_but_a_new_gpu_needs_a_hello() -> None:
    old = topology()
    mig = mig_layout(old, 0, ["3g.40gb", "3g.40gb"])
    states = changed_gpus(old, mig)
    assert states is not None
    assert len(states) == 1
    assert apply_gpu_states(old, states).gpus[0].mig_instances == mig.gpus[0].mig_instances
    assert changed_gpus(old, topology(gpus=4)) is None  # GPUs appeared
    assert changed_gpus(old, with_gpu(old, 0, product="other")) is None  # static field
    assert changed_gpus(old, msgspec.structs.replace(old, driver_version="999")) is None


def test_applying_a_state_for_a_gpu_the_node_lacks_is_invalid() -> None:
    old = topology()
    other = changed_gpus(topology("node-b"), with_gpu(topology("node-b"), 0, healthy=False))
    assert other is not None
    with pytest.raises(FrameError) as info:
        apply_gpu_states(old, other)  # UUIDs of another node
    assert info.value.reason is CloseReason.INVALID_STATE
    far = msgspec.structs.replace(other[0], index=7)
    with pytest.raises(FrameError):
        apply_gpu_states(old, (far,))


# --- fuzzing -----------------------------------------------------------------------------------

_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


@_FUZZ
@given(st.binary(max_size=2048))
def test_fuzz_random_bytes_decode_or_raise_frame_error(data: bytes) -> None:
    outcome: object
    try:
        outcome = decode_agent_frame(data)
    except FrameError as exc:
        outcome = exc.reason
    assert isinstance(outcome, Hello | Delta | Heartbeat | CloseReason)


_HELLO_KEYS = [
    "type",
    "version",
    "node",
    "agent_version",
    "agent_id",
    "seq",
    "topology",
    "allocations",
    "gpus",
    "links",
    "hostname",
    "index",
    "uuid",
]


@_FUZZ
@given(
    st.sampled_from(["hello", "delta", "heartbeat", "ack", "x"]),
    st.dictionaries(st.sampled_from(_HELLO_KEYS), _json_like, max_size=6),
)
def test_fuzz_mutated_frames_never_escape_as_other_errors(
    kind: str, fields: dict[str, object]
) -> None:
    base = msgspec.to_builtins(hello()) if kind == "hello" else {"type": kind, "version": 1}
    base.update(fields)
    try:
        data = msgpack.packb(base)
    except (OverflowError, ValueError, TypeError):
        return  # not representable in MessagePack at all
    try:
        frame = decode_agent_frame(data)
    except FrameError:
        return
    assert frame.version == WIRE_VERSION
    assert decode_agent_frame(encode(frame)) == frame  # what passed is re-encodable as is
