"""Decoding one line of a watch stream into ``(type, object)``."""

from __future__ import annotations

from typing import Any, cast

import msgspec

from common.kube.errors import KubeError, error_for_status
from common.kube.resources import Resource
from common.kube.types import KubeObject, WatchEventType

__all__ = ["parse_watch_line"]

_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})


class _Event(msgspec.Struct):
    type: str
    object: dict[str, Any]


_DECODER = msgspec.json.Decoder(_Event)


def parse_watch_line(line: bytes, resource: Resource) -> tuple[WatchEventType, KubeObject]:
    """One watch event. An ``ERROR`` event becomes its ``KubeError`` (``Gone`` for 410);
    a line that isn't a watch event raises ``KubeError``."""
    try:
        event = _DECODER.decode(line)
    except msgspec.DecodeError as exc:
        raise KubeError(f"watch {resource.plural}: malformed event {line[:200]!r}: {exc}") from exc
    kind, obj = event.type, event.object
    if kind == "ERROR":
        code = obj.get("code")
        raise error_for_status(code if isinstance(code, int) else 500, obj)
    if kind not in _TYPES:
        raise KubeError(f"watch {resource.plural}: unknown event type {kind!r}")
    return cast(WatchEventType, kind), obj
