"""GPU slots per network domain (:class:`DomainSlots`): for one node label (the leaf label), the
device slots of the nodes carrying each value and how many are in use — what
``DomainUtilisation`` scores — kept current as nodes change instead of summed per cycle.

The :class:`~.snapshot.Snapshot` builds one per label on first use and moves one node's slots on
every ``assume``/``forget``/``replace``/``remove``.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.core.snapshot.nodeinfo import NodeInfo

__all__ = ["DomainSlots"]


class DomainSlots:
    """Per value of node label ``key``: the slots of its nodes (``total``) and those in use
    (``used``, each node's use capped at its slots). Exactly the values some node carries are
    present, zeros included."""

    __slots__ = ("_nodes", "key", "total", "used")

    def __init__(self, key: str, nodes: Iterable[NodeInfo] = ()) -> None:
        self.key = key
        self.total: dict[str, int] = {}
        self.used: dict[str, int] = {}
        self._nodes: dict[str, int] = {}  # value → how many nodes carry it
        for node in nodes:
            self.swap(None, node)

    def copy(self) -> DomainSlots:
        other = DomainSlots(self.key)
        other.total = dict(self.total)
        other.used = dict(self.used)
        other._nodes = dict(self._nodes)
        return other

    def swap(self, old: NodeInfo | None, new: NodeInfo | None) -> None:
        """``old`` leaves (if any), ``new`` comes (if any)."""
        key = self.key
        if old is not None:
            value = old.labels.get(key)
            if value is not None:
                left = self._nodes[value] - 1
                if left:
                    self._nodes[value] = left
                    self.total[value] -= old.gpu_slots
                    self.used[value] -= min(old.gpu_slots, old.gpu_slots_used)
                else:
                    del self._nodes[value], self.total[value], self.used[value]
        if new is not None:
            value = new.labels.get(key)
            if value is not None:
                self._nodes[value] = self._nodes.get(value, 0) + 1
                self.total[value] = self.total.get(value, 0) + new.gpu_slots
                self.used[value] = self.used.get(value, 0) + min(new.gpu_slots, new.gpu_slots_used)
