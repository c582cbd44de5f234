"""A watch stream cut into lines, and one line decoded into ``(type, object)``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import msgspec

from common.kube.errors import KubeError, error_for_status
from common.kube.resources import Resource
from common.kube.types import KubeObject, WatchEventType

__all__ = ["parse_watch_line", "stream_lines"]

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


async def stream_lines(read: Callable[[], Awaitable[bytes]]) -> AsyncIterator[bytes]:
    """The lines of a stream (``read`` gives what has come, ``b""`` at its end), without their
    newline, blank ones left out; a last line without one is yielded at the end. As much as has
    come is cut at once (a burst of events is one read, not one per line), and a line may be
    any length: an object over the HTTP client's line limit (128 KiB) is one event like another."""
    parts: list[bytes] = []  # the start of a line not ended yet
    while True:
        chunk = await read()
        if not chunk:
            tail = b"".join(parts)
            if tail and not tail.isspace():
                yield tail
            return
        if b"\n" not in chunk:
            parts.append(chunk)
            continue
        lines = chunk.split(b"\n")
        if parts:
            parts.append(lines[0])
            lines[0] = b"".join(parts)
            parts.clear()
        if lines[-1]:
            parts.append(lines[-1])
        for line in lines[:-1]:
            if line and not line.isspace():
                yield line
