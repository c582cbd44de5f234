"""Decoding watch events of pods and Nodes into only what their handlers read.

**Slim decoding.** :func:`bound_pod_event` decodes a bound-pod watch line straight into what
:func:`~coordinator.inventory.translate.bound_pod_fields` keeps (the metadata without its managed
fields, the spec, the phase), and :func:`pending_pod_event` a pending pod's ``DELETED`` into its
metadata alone (the queue only needs to know which pod left) and its other events into the whole
pod but its managed fields: the managed fields, and a bound pod's container statuses and
conditions, are never built as dicts. A line they cannot decode so goes through
:func:`~common.kube.watch.parse_watch_line` and ``slim`` as before (an ``ERROR`` event included).
A bound pod that only started (its status alone moved) is not decoded or translated again
(:class:`BoundPodLines`).

**Fingerprints:** what a watch event of a Node or a bound pod carries that the inventory reads,
as a digest taken from the raw JSON without building the object.

Most watch events change nothing the scheduler uses (Node heartbeats; a bound pod's status as
it starts and runs), yet decoding each into dicts and translating it costs more than all the
rest of its handling. A fingerprint decodes the event into a small typed ``msgspec`` struct that
keeps the parts :func:`~coordinator.inventory.translate.kube_node` /
:func:`~coordinator.inventory.translate.bound_pod` read as raw JSON (skipping the rest: managed
fields, container statuses, heartbeat times) and digests them. The
:class:`~.reflector.Reflector` drops a ``MODIFIED`` event whose digest equals that of the last
object it handed over under the same identity (a pod's uid, a Node's name); any other event is
decoded and handed over as before. The API server writes an object's JSON the same way each
time (fields in a fixed order, map keys sorted), so equal parts give equal bytes.

The digest is Python's 64-bit ``hash`` of the parts' bytes (SipHash, seeded per process): a
cryptographic digest of a Node's 10 kB topology annotation costs as much as decoding it, and two
different contents share a hash with odds of about 2⁻⁶⁴ per event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgspec

from common.kube import PODS, KubeObject, WatchEventType
from common.kube.watch import parse_watch_line
from coordinator.inventory.translate import bound_pod_fields

__all__ = [
    "BoundPodLines",
    "Fingerprint",
    "FingerprintOf",
    "bound_pod_event",
    "bound_pod_fingerprint",
    "node_fingerprint",
    "pending_pod_event",
]

Fingerprint = tuple[str, str, int]
"""(identity, resourceVersion, digest); an empty identity is never matched."""
FingerprintOf = Callable[[bytes], tuple[str, Fingerprint] | None]
"""A watch line → (event type, its object's fingerprint); ``None`` for a line that is not a
watch event of that kind of object (the reflector's ordinary decoding then says why)."""

_NULL: Final = msgspec.Raw(b"null")


class _PodMeta(msgspec.Struct):
    uid: str = ""
    name: str = ""
    namespace: str = ""
    resourceVersion: str = ""
    deletionTimestamp: str | None = None
    labels: msgspec.Raw = _NULL
    annotations: msgspec.Raw = _NULL
    ownerReferences: msgspec.Raw = _NULL


class _Phase(msgspec.Struct):
    phase: str = ""
    startTime: str = ""


class _Pod(msgspec.Struct):
    metadata: _PodMeta = msgspec.field(default_factory=_PodMeta)
    spec: msgspec.Raw = _NULL
    status: _Phase = msgspec.field(default_factory=_Phase)


class _NodeMeta(msgspec.Struct):
    name: str = ""
    resourceVersion: str = ""
    labels: msgspec.Raw = _NULL
    annotations: msgspec.Raw = _NULL


class _Condition(msgspec.Struct):
    type: str = ""
    status: str = ""


class _NodeStatus(msgspec.Struct):
    allocatable: msgspec.Raw = _NULL
    capacity: msgspec.Raw = _NULL
    conditions: list[_Condition] | None = None


class _Node(msgspec.Struct):
    metadata: _NodeMeta = msgspec.field(default_factory=_NodeMeta)
    spec: msgspec.Raw = _NULL
    status: _NodeStatus = msgspec.field(default_factory=_NodeStatus)


class _PodEvent(msgspec.Struct):
    type: str
    object: _Pod


class _NodeEvent(msgspec.Struct):
    type: str
    object: _Node


_POD = msgspec.json.Decoder(_PodEvent)
_NODE = msgspec.json.Decoder(_NodeEvent)


def _digest(*parts: bytes | msgspec.Raw) -> int:
    return hash(tuple(bytes(part) for part in parts))


def _pod_fingerprint(line: bytes) -> tuple[_PodEvent, int, int] | None:
    """The event, the digest of its object's metadata and spec (``base``), and the digest of
    that with its phase and start time."""
    try:
        event = _POD.decode(line)
    except msgspec.DecodeError:
        return None
    pod = event.object
    meta = pod.metadata
    base = _digest(
        meta.name.encode(),
        meta.namespace.encode(),
        (meta.deletionTimestamp or "").encode(),
        meta.labels,
        meta.annotations,
        meta.ownerReferences,
        pod.spec,
    )
    return event, base, hash((base, pod.status.phase, pod.status.startTime))


def bound_pod_fingerprint(line: bytes) -> tuple[str, Fingerprint] | None:
    """A pod's uid, resourceVersion and the digest of its metadata (labels, annotations, owners,
    deletion), its spec, its phase and start time: everything but the status's other fields."""
    seen = _pod_fingerprint(line)
    if seen is None:
        return None
    event, _, digest = seen
    meta = event.object.metadata
    return event.type, (meta.uid, meta.resourceVersion, digest)


def node_fingerprint(line: bytes) -> tuple[str, Fingerprint] | None:
    """A Node's name, resourceVersion and the digest of its labels, annotations, spec,
    allocatable, capacity and conditions' statuses (not their times)."""
    try:
        event = _NODE.decode(line)
    except msgspec.DecodeError:
        return None
    node = event.object
    meta, status = node.metadata, node.status
    conditions = ",".join(f"{c.type}={c.status}" for c in status.conditions or ())
    digest = _digest(
        meta.labels,
        meta.annotations,
        node.spec,
        status.allocatable,
        status.capacity,
        conditions.encode(),
    )
    return event.type, (meta.name, meta.resourceVersion, digest)


class _Meta(msgspec.Struct, omit_defaults=True):
    """ObjectMeta without ``managedFields`` (and the fields nothing here reads)."""

    name: str | None = None
    generateName: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resourceVersion: str | None = None
    generation: int | None = None
    creationTimestamp: str | None = None
    deletionTimestamp: str | None = None
    deletionGracePeriodSeconds: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    ownerReferences: list[dict[str, Any]] | None = None
    finalizers: list[str] | None = None


class _SlimPhase(msgspec.Struct, omit_defaults=True):
    phase: str | None = None
    startTime: str | None = None


class _SlimPod(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: dict[str, Any] = msgspec.field(default_factory=dict)
    status: _SlimPhase = msgspec.field(default_factory=_SlimPhase)


class _SlimPodEvent(msgspec.Struct):
    type: str
    object: _SlimPod


class _MetaOnly(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


class _MetaOnlyEvent(msgspec.Struct):
    type: str
    object: _MetaOnly


class _PendingPod(msgspec.Struct):
    """A pod as its API object, without ``metadata.managedFields``."""

    kind: str | None = None
    apiVersion: str | None = None
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: dict[str, Any] | None = None
    status: dict[str, Any] | None = None


class _PendingPodEvent(msgspec.Struct):
    type: str
    object: _PendingPod


class _BoundMeta(msgspec.Struct, omit_defaults=True):
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resourceVersion: str | None = None


class _BoundSpec(msgspec.Struct):
    nodeName: str = ""


class _Bound(msgspec.Struct):
    metadata: _BoundMeta = msgspec.field(default_factory=_BoundMeta)
    spec: _BoundSpec = msgspec.field(default_factory=_BoundSpec)


class _BoundEvent(msgspec.Struct):
    type: str
    object: _Bound


_SLIM_POD = msgspec.json.Decoder(_SlimPodEvent)
_META_ONLY = msgspec.json.Decoder(_MetaOnlyEvent)
_PENDING = msgspec.json.Decoder(_PendingPodEvent)
_BOUND = msgspec.json.Decoder(_BoundEvent)
#: A pod's ``spec.nodeName`` key as the API server writes it (inside a JSON string, such as an
#: annotation holding a manifest, its quotes are escaped and this does not match).
_NODE_NAME: Final = b'"nodeName":"'
_TYPES: Final = frozenset({"ADDED", "MODIFIED", "DELETED"})
#: How the API server starts a DELETED watch event (``type`` before ``object``).
_DELETED: Final = b'{"type":"DELETED",'


def bound_pod_event(line: bytes) -> tuple[WatchEventType, KubeObject]:
    """A bound-pod watch line as ``(type, bound_pod_fields(object))``."""
    try:
        event = _SLIM_POD.decode(line)
    except msgspec.DecodeError:
        event = None
    if event is None or event.type not in _TYPES:
        kind, obj = parse_watch_line(line, PODS)  # errors raise; bookmarks pass
        return kind, bound_pod_fields(obj)
    pod = event.object
    obj = {
        "metadata": msgspec.to_builtins(pod.metadata),
        "spec": pod.spec,
        "status": msgspec.to_builtins(pod.status),
    }
    return event.type, obj  # type: ignore[return-value]


def pending_pod_event(line: bytes) -> tuple[WatchEventType, KubeObject]:
    """A pending-pod watch line; a ``DELETED`` one (the pod was bound or deleted) with its
    metadata alone, every other one whole but for its managed fields (the queue keeps the
    object of every pod waiting; nothing reads those). A pod that has a node is no longer
    pending: it comes as the ``DELETED`` the server sends when a pod leaves a
    ``spec.nodeName=`` selector, with its name, namespace, UID and resourceVersion (see
    :func:`~.pending.pending_selector`)."""
    if line.startswith(_DELETED):
        try:
            event = _META_ONLY.decode(line)
        except msgspec.DecodeError:
            event = None
        if event is not None and event.type == "DELETED":
            return "DELETED", {"metadata": msgspec.to_builtins(event.object.metadata)}
    elif _NODE_NAME in line:
        try:
            bound = _BOUND.decode(line)
        except msgspec.DecodeError:
            bound = None
        if bound is not None and bound.type in _TYPES and bound.object.spec.nodeName:
            return "DELETED", {"metadata": msgspec.to_builtins(bound.object.metadata)}
    try:
        whole = _PENDING.decode(line)
    except msgspec.DecodeError:
        return parse_watch_line(line, PODS)  # not a pod as the API server writes one
    if whole.type not in ("ADDED", "MODIFIED"):
        return parse_watch_line(line, PODS)  # errors raise; bookmarks pass
    pod = whole.object
    parts = {"kind": pod.kind, "apiVersion": pod.apiVersion, "spec": pod.spec, "status": pod.status}
    obj = {k: v for k, v in parts.items() if v is not None}
    obj["metadata"] = msgspec.to_builtins(pod.metadata)
    return whole.type, obj  # type: ignore[return-value]


_ENDED: Final = frozenset({"Succeeded", "Failed"})


class BoundPodLines:
    """The bound-pod watch's :meth:`fingerprint` and :meth:`decode`, sharing what a line's
    fingerprint read. A ``MODIFIED`` pod whose metadata and spec digest as those of the last
    object decoded under its uid — only its status moved, as when it starts — and that has not
    ended is decoded as its status alone: ``{"metadata": {uid, name, namespace,
    resourceVersion}, "status": {phase, startTime}}``, no ``spec``; the handler applies it to
    the pod it holds (``known(uid)``: it holds one), instead of translating the pod again. Every
    other line is decoded by :func:`bound_pod_event`. :meth:`forget` at every list (the objects
    listed were not decoded here)."""

    def __init__(self, known: Callable[[str], bool]) -> None:
        self._known = known
        self._bases: dict[str, int] = {}  # uid → digest of the last object decoded's base
        self._last: tuple[bytes, _PodEvent, int] | None = None  # the line last fingerprinted

    def fingerprint(self, line: bytes) -> tuple[str, Fingerprint] | None:
        seen = _pod_fingerprint(line)
        if seen is None:
            self._last = None
            return None
        event, base, digest = seen
        self._last = (line, event, base)
        meta = event.object.metadata
        return event.type, (meta.uid, meta.resourceVersion, digest)

    def decode(self, line: bytes) -> tuple[WatchEventType, KubeObject]:
        last, self._last = self._last, None
        if last is None or last[0] is not line:
            return bound_pod_event(line)
        _, event, base = last
        meta, status = event.object.metadata, event.object.status
        uid = meta.uid
        if event.type == "DELETED" or not uid:
            self._bases.pop(uid, None)
            return bound_pod_event(line)
        if (
            event.type == "MODIFIED"
            and self._bases.get(uid) == base
            and status.phase not in _ENDED
            and self._known(uid)
        ):
            restatus = {"phase": status.phase, "startTime": status.startTime}
            return "MODIFIED", {
                "metadata": {
                    "uid": uid,
                    "name": meta.name,
                    "namespace": meta.namespace,
                    "resourceVersion": meta.resourceVersion,
                },
                "status": restatus,
            }
        kind, obj = bound_pod_event(line)
        if kind in _TYPES:
            self._bases[uid] = base
        return kind, obj

    def forget(self) -> None:
        self._bases.clear()
