"""The capacity stream's frames (docs/design.md §3): agent → coordinator over a WebSocket.

Every frame is one binary WebSocket message holding one MessagePack **map** with a ``type`` and a
``version`` key. Agent → coordinator: ``hello`` (the full state), ``delta`` (what changed since the
previous frame, numbered by ``seq``), ``heartbeat``. Coordinator → agent: ``ack`` (the last ``seq``
it applied). See docs/stream.md for the protocol around the frames.

Decoding validates everything — shape, types, bounds, the ``version`` — and raises exactly one
exception type, :class:`FrameError`, whose :attr:`FrameError.reason` says how the coordinator
closes the connection. Unknown keys inside a supported version are ignored (additive evolution);
anything incompatible bumps :data:`WIRE_VERSION`.
"""

from __future__ import annotations

import copy
import enum
from typing import Annotated, Final, TypeVar

import msgspec

from common.model import Gpu, GpuHealth, MigInstance, MigProfileCapacity, NodeTopology

WIRE_VERSION: Final = 1
SUPPORTED_VERSIONS: Final = frozenset({WIRE_VERSION})
MAX_FRAME_BYTES: Final = 1024 * 1024
"""Largest frame either side sends or accepts (a DGX hello with allocations is ~20 KiB)."""

_MAX_GPUS: Final = 256
_MAX_ALLOCATIONS: Final = 4096
_SEQ_MAX: Final = 2**63 - 1

# DNS-1123 subdomain: what Kubernetes accepts as a Node name.
NodeName = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    ),
]
Seq = Annotated[int, msgspec.Meta(ge=0, le=_SEQ_MAX)]
ShortText = Annotated[str, msgspec.Meta(max_length=256)]
GpuIndex = Annotated[int, msgspec.Meta(ge=0, lt=_MAX_GPUS)]


class CloseReason(enum.Enum):
    """Why a stream was closed: the WebSocket close code and the slug that starts the message.

    The close message reads ``"<slug>: <detail>"`` so agents and people can both act on it.
    """

    MALFORMED = (1007, "malformed")
    OVERSIZED = (1009, "oversized")
    UNSUPPORTED_VERSION = (1002, "unsupported-version")
    UNEXPECTED_FRAME = (1002, "unexpected-frame")
    HELLO_REQUIRED = (1002, "hello-required")
    SEQ_OUT_OF_ORDER = (1002, "seq-out-of-order")
    INVALID_STATE = (1007, "invalid-state")
    NODE_CONFLICT = (1008, "node-conflict")
    UNKNOWN_NODE = (1008, "unknown-node")  # the API server has no such Node (for too long)
    UNAUTHORIZED = (1008, "unauthorized")
    TIMEOUT = (1008, "timeout")  # no hello within the deadline, or silent too long after it
    REPLACED = (1000, "replaced")
    SHUTTING_DOWN = (1001, "shutting-down")
    AGENT_STOPPING = (1000, "agent-stopping")
    INTERNAL = (1011, "internal")

    @property
    def ws_code(self) -> int:
        return self.value[0]

    @property
    def slug(self) -> str:
        return self.value[1]

    def message(self, detail: str) -> str:
        """Close message, trimmed to the 123 bytes a WebSocket close frame can carry."""
        text = f"{self.slug}: {detail}" if detail else self.slug
        raw = text.encode("utf-8")[:123]
        return raw.decode("utf-8", errors="ignore")

    @classmethod
    def from_message(cls, message: str | None) -> CloseReason | None:
        """The reason named by a close message (``None`` for an unknown slug)."""
        if not message:
            return None
        slug = message.split(":", 1)[0].strip()
        for reason in cls:
            if reason.slug == slug:
                return reason
        return None


class FrameError(Exception):
    """A frame that must not be applied; ``reason`` says how to close the stream."""

    def __init__(self, reason: CloseReason, detail: str) -> None:
        super().__init__(f"{reason.slug}: {detail}")
        self.reason = reason
        self.detail = detail


# --- allocations (from the kubelet PodResources API) -----------------------------------------


class DeviceAllocation(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Devices of one resource held by a container (GPU or MIG device UUIDs)."""

    resource: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]  # "nvidia.com/gpu"
    ids: tuple[ShortText, ...]
    numa_nodes: tuple[Annotated[int, msgspec.Meta(ge=0, lt=1024)], ...] = ()


class ContainerAllocation(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What one running container actually holds on the node."""

    namespace: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    pod: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    container: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    devices: tuple[DeviceAllocation, ...] = ()
    cpus: tuple[Annotated[int, msgspec.Meta(ge=0, lt=1 << 20)], ...] = ()


Allocations = Annotated[tuple[ContainerAllocation, ...], msgspec.Meta(max_length=_MAX_ALLOCATIONS)]


class GpuState(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The parts of one GPU that change while the node runs (health, memory, MIG layout)."""

    index: GpuIndex
    uuid: ShortText
    healthy: bool = True
    health_reason: ShortText | None = None
    memory_free_mib: Annotated[int, msgspec.Meta(ge=0)] | None = None
    mig_enabled: bool | None = None
    mig_instances: tuple[MigInstance, ...] = ()
    mig_creatable: tuple[MigProfileCapacity, ...] = ()
    health: GpuHealth | None = None  # NVML's health readings and the agent's verdict


# --- frames ---------------------------------------------------------------------------------


class Hello(msgspec.Struct, frozen=True, kw_only=True, tag="hello", tag_field="type"):
    """The agent's full state; first frame of every connection, and a resync at any time.

    ``seq`` is the number of the state it describes: the next delta carries ``seq + 1``.
    ``agent_id`` identifies the agent process, so the coordinator can tell a reconnect of the same
    agent (replace the old connection) from a second agent claiming the node (refuse it).
    """

    version: int = WIRE_VERSION
    node: NodeName
    agent_version: ShortText
    agent_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    seq: Seq = 0
    topology: NodeTopology
    allocations: Allocations = ()


class Delta(msgspec.Struct, frozen=True, kw_only=True, tag="delta", tag_field="type"):
    """What changed since frame ``seq - 1``: the full dynamic state of each *changed* GPU, and the
    full allocation list when it changed (``None``: unchanged). A change to the node's static shape
    (GPUs appear/disappear, links change) is sent as a new ``hello`` instead."""

    version: int = WIRE_VERSION
    seq: Annotated[int, msgspec.Meta(ge=1, le=_SEQ_MAX)]
    gpus: Annotated[tuple[GpuState, ...], msgspec.Meta(max_length=_MAX_GPUS)] = ()
    allocations: Allocations | None = None


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True, tag="heartbeat", tag_field="type"):
    """I am alive; ``seq`` is the last frame number the agent sent."""

    version: int = WIRE_VERSION
    seq: Seq = 0


class Ack(msgspec.Struct, frozen=True, kw_only=True, tag="ack", tag_field="type"):
    """Coordinator → agent: everything up to and including ``seq`` is applied."""

    version: int = WIRE_VERSION
    seq: Seq


AgentFrame = Hello | Delta | Heartbeat
Frame = Hello | Delta | Heartbeat | Ack


class _Envelope(msgspec.Struct):
    type: str
    version: int


_ENCODER: Final = msgspec.msgpack.Encoder()
_ENVELOPE: Final = msgspec.msgpack.Decoder(_Envelope)
_AGENT_DECODER: Final = msgspec.msgpack.Decoder(AgentFrame)
_ANY_DECODER: Final = msgspec.msgpack.Decoder(Frame)
_AGENT_TYPES: Final = frozenset({"hello", "delta", "heartbeat"})
_ALL_TYPES: Final = _AGENT_TYPES | {"ack"}


def encode(frame: Frame) -> bytes:
    """Serialise a frame; raises :class:`FrameError` (oversized) rather than emit one too big."""
    data = _ENCODER.encode(frame)
    if len(data) > MAX_FRAME_BYTES:
        raise FrameError(
            CloseReason.OVERSIZED, f"{len(data)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit"
        )
    return data


_T = TypeVar("_T")


def _decode(data: bytes, decoder: msgspec.msgpack.Decoder[_T], types: frozenset[str]) -> _T:
    if len(data) > MAX_FRAME_BYTES:
        raise FrameError(
            CloseReason.OVERSIZED, f"{len(data)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit"
        )
    # The envelope first: a frame must name its version and type before anything else is read,
    # so an agent speaking another version learns that, not which field it spelled differently.
    try:
        env = _ENVELOPE.decode(data)
    except msgspec.ValidationError as exc:  # (a subclass of DecodeError: test it first)
        raise FrameError(CloseReason.MALFORMED, f"not a frame: {exc}") from None
    except msgspec.DecodeError:
        raise FrameError(CloseReason.MALFORMED, "not a MessagePack document") from None
    if env.version not in SUPPORTED_VERSIONS:
        raise FrameError(
            CloseReason.UNSUPPORTED_VERSION,
            f"version {env.version} (this side speaks {sorted(SUPPORTED_VERSIONS)})",
        )
    if env.type not in types:
        raise FrameError(CloseReason.UNEXPECTED_FRAME, f"frame type {env.type[:40]!r}")
    try:
        return decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise FrameError(CloseReason.MALFORMED, f"bad {env.type} frame: {exc}") from None


def decode_agent_frame(data: bytes) -> Hello | Delta | Heartbeat:
    """What the coordinator reads: a validated agent frame, or :class:`FrameError`."""
    frame = _decode(data, _AGENT_DECODER, _AGENT_TYPES)
    assert isinstance(frame, Hello | Delta | Heartbeat)
    return frame


def decode_frame(data: bytes) -> Frame:
    """Any frame, either direction (the agent uses it to read acks)."""
    frame = _decode(data, _ANY_DECODER, _ALL_TYPES)
    assert isinstance(frame, Hello | Delta | Heartbeat | Ack)
    return frame


# --- computing and applying deltas -----------------------------------------------------------


def gpu_state(gpu: Gpu) -> GpuState:
    """The dynamic part of one GPU."""
    return GpuState(
        index=gpu.index,
        uuid=gpu.uuid,
        healthy=gpu.healthy,
        health_reason=gpu.health_reason,
        memory_free_mib=gpu.memory_free_mib,
        mig_enabled=gpu.mig_enabled,
        mig_instances=gpu.mig_instances,
        mig_creatable=gpu.mig_creatable,
        health=gpu.health,
    )


def _with_state(gpu: Gpu, state: GpuState) -> Gpu:
    return msgspec.structs.replace(
        gpu,
        healthy=state.healthy,
        health_reason=state.health_reason,
        memory_free_mib=state.memory_free_mib,
        mig_enabled=state.mig_enabled,
        mig_instances=state.mig_instances,
        mig_creatable=state.mig_creatable,
        health=state.health,
    )


def changed_gpus(old: NodeTopology, new: NodeTopology) -> tuple[GpuState, ...] | None:
    """The states of GPUs that differ from ``old`` to ``new``; ``None`` when anything static
    changed too (GPUs, links, NUMA, versions…), which needs a full ``hello``."""
    if len(old.gpus) != len(new.gpus):
        return None
    states: list[GpuState] = []
    for before, after in zip(old.gpus, new.gpus, strict=True):
        if before == after:
            continue
        if _with_state(after, gpu_state(before)) != before:
            return None
        states.append(gpu_state(after))
    if states:
        if msgspec.structs.replace(new, gpus=old.gpus) != old:
            return None
    elif new != old:
        return None
    return tuple(states)


def apply_gpu_states(topology: NodeTopology, states: tuple[GpuState, ...]) -> NodeTopology:
    """``topology`` with ``states`` applied; :class:`FrameError` if a state names a GPU the node
    doesn't have (index out of range or a UUID that doesn't match) or one GPU twice."""
    if not states:
        return topology
    gpus = list(topology.gpus)
    seen: set[int] = set()
    for state in states:
        if state.index in seen:
            raise FrameError(CloseReason.INVALID_STATE, f"delta lists GPU {state.index} twice")
        seen.add(state.index)
        if state.index >= len(gpus):
            raise FrameError(
                CloseReason.INVALID_STATE,
                f"delta names GPU {state.index}; the node has {len(gpus)}",
            )
        if gpus[state.index].uuid != state.uuid:
            raise FrameError(
                CloseReason.INVALID_STATE,
                f"delta names GPU {state.index} as {state.uuid[:60]}, hello said "
                f"{gpus[state.index].uuid}",
            )
        gpus[state.index] = _with_state(gpus[state.index], state)
    # Same GPUs (index and UUID checked above), same links: the invariants NodeTopology checks in
    # __post_init__ (an O(n²) matrix walk) still hold, so copy without re-running it.
    updated = copy.copy(topology)
    msgspec.structs.force_setattr(updated, "gpus", tuple(gpus))
    return updated


__all__ = [
    "MAX_FRAME_BYTES",
    "SUPPORTED_VERSIONS",
    "WIRE_VERSION",
    "Ack",
    "AgentFrame",
    "Allocations",
    "CloseReason",
    "ContainerAllocation",
    "Delta",
    "DeviceAllocation",
    "Frame",
    "FrameError",
    "GpuState",
    "Heartbeat",
    "Hello",
    "apply_gpu_states",
    "changed_gpus",
    "decode_agent_frame",
    "decode_frame",
    "encode",
    "gpu_state",
]
