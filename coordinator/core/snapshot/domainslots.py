"""GPU slots per network domain (:class:`DomainSlots`): for one node label (the leaf label), the
device slots of the nodes carrying each value and how many are in use — what
``DomainUtilisation`` scores — kept current as nodes change instead of summed per cycle.

The :class:`~.snapshot.Snapshot` builds one per label on first use and moves one node's slots on
every ``assume``/``forget``/``replace``/``remove``. It also keeps which nodes are *open*: in no
domain of the label, or with GPU slots partly in use — where a lone pod breaks up no whole node
of a domain (``CliqueKeep`` visits them first).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from coordinator.core.snapshot.nodeinfo import NodeInfo

__all__ = ["DomainSlots"]


class DomainSlots:
    """Per value of node label ``key``: the slots of its nodes (``total``) and those in use
    (``used``, each node's use capped at its slots). Exactly the values some node carries are
    present, zeros included."""

    __slots__ = ("_nodes", "_open", "_open_owned", "key", "total", "used")

    def __init__(self, key: str, nodes: Iterable[NodeInfo] = ()) -> None:
        self.key = key
        self.total: dict[str, int] = {}
        self.used: dict[str, int] = {}
        self._nodes: dict[str, int] = {}  # value → how many nodes carry it
        self._open: set[str] = set()
        self._open_owned = True  # False: shared with a copy, copied before a change
        for node in nodes:
            self.swap(None, node)

    @property
    def open(self) -> Collection[str]:
        """Names of the nodes with no value (or an empty one) of the label, or whose GPU slots
        are partly in use (read-only; changes with the snapshot)."""
        return self._open

    def copy(self) -> DomainSlots:
        other = DomainSlots(self.key)
        other.total = dict(self.total)
        other.used = dict(self.used)
        other._nodes = dict(self._nodes)
        other._open = self._open  # shared until one side changes it
        other._open_owned = self._open_owned = False
        return other

    def _mark(self, node: NodeInfo, is_open: bool) -> None:
        if (node.name in self._open) == is_open:
            return
        if not self._open_owned:
            self._open, self._open_owned = set(self._open), True
        if is_open:
            self._open.add(node.name)
        else:
            self._open.discard(node.name)

    def swap(self, old: NodeInfo | None, new: NodeInfo | None) -> None:
        """``old`` leaves (if any), ``new`` comes (if any)."""
        key = self.key
        if old is not None and (new is None or new.name != old.name):
            self._mark(old, False)
        if new is not None:
            self._mark(new, not new.labels.get(key) or 0 < new.gpu_slots_used < new.gpu_slots)
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
