"""Which node reports each GPU and MIG UUID, so that no two live nodes report the same device."""

from __future__ import annotations

from collections.abc import Callable

from common.wire import CloseReason, FrameError


class DeviceOwners:
    """UUID → node. ``live(node)`` says whether a node's report still counts (its agent is not
    gone or silent); a UUID held by a node that is not live passes to the next reporter."""

    def __init__(self, live: Callable[[str], bool]) -> None:
        self._live = live
        self._owner: dict[str, str] = {}
        self._held: dict[str, frozenset[str]] = {}

    def check(self, node: str, devices: frozenset[str]) -> None:
        """Raise ``FrameError`` if another live node reports one of ``devices``."""
        for uuid in sorted(devices):
            owner = self._owner.get(uuid)
            if owner is not None and owner != node and self._live(owner):
                raise FrameError(
                    CloseReason.INVALID_STATE, f"{uuid[:40]} is already reported by node {owner}"
                )

    def claim(self, node: str, devices: frozenset[str]) -> None:
        """``node`` now reports exactly ``devices`` (checked first)."""
        self.release(node, keep=devices)
        for uuid in devices:
            self._owner[uuid] = node
        if devices:
            self._held[node] = devices

    def release(self, node: str, keep: frozenset[str] = frozenset()) -> None:
        for uuid in self._held.pop(node, frozenset()) - keep:
            if self._owner.get(uuid) == node:
                del self._owner[uuid]

    def owner(self, uuid: str) -> str | None:
        return self._owner.get(uuid)
