"""Nodes bucketed by free devices (:class:`CapacityIndex`), so a cycle for a pod that needs
several whole GPUs, a MIG profile, a share of one GPU or an extended resource few nodes list
visits the nodes that have them, not every node.

The :class:`~.snapshot.Snapshot` keeps one current through ``assume``/``forget``/``replace``/
``remove`` (each moves one node between buckets). Answers are supersets of the nodes a pod's
device filter can pass — a node without an agent's topology is never in them, because no GPU
pod is placed there — and ``None`` when a bucket holds too many nodes to be worth narrowing to.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from coordinator.core.snapshot.nodeinfo import NodeInfo

__all__ = ["CapacityIndex"]

#: Narrow only to at most this share of the nodes: above it, visiting nodes in order and
#: stopping once enough are feasible is as quick.
_SELECTIVE: Final = 0.25
#: The same for shares, whose cycles mostly find few nodes with room late in a busy cluster.
_SELECTIVE_SHARE: Final = 0.25


def _room(node: NodeInfo) -> int:
    """The most thousandths of one GPU a share could get on ``node`` (0: none)."""
    return max((milli for milli, _ in node.share_room.values()), default=0)


#: What every node lists: not indexed by :meth:`CapacityIndex.listing`.
_EVERYWHERE: Final = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})
_NONE: Final[frozenset[str]] = frozenset()


class CapacityIndex:
    """Node names by free whole GPUs, by MIG profiles with a free instance, by the most
    thousandths of a GPU a share could still get there, and by the extended resources their
    allocatable lists."""

    __slots__ = ("_by_gpus", "_by_listed", "_by_mig", "_by_room", "_total")

    def __init__(self, nodes: Iterable[NodeInfo] = ()) -> None:
        self._by_gpus: dict[int, set[str]] = {}
        self._by_mig: dict[str, set[str]] = {}
        self._by_room: dict[int, set[str]] = {}
        self._by_listed: dict[str, set[str]] = {}
        self._total = 0
        for node in nodes:
            self.add(node)

    def copy(self) -> CapacityIndex:
        other = CapacityIndex()
        other._by_gpus = {k: set(v) for k, v in self._by_gpus.items()}
        other._by_mig = {k: set(v) for k, v in self._by_mig.items()}
        other._by_room = {k: set(v) for k, v in self._by_room.items()}
        other._by_listed = {k: set(v) for k, v in self._by_listed.items()}
        other._total = self._total
        return other

    def add(self, node: NodeInfo) -> None:
        self._total += 1
        for resource, amount in node.allocatable.items():
            if amount > 0 and resource not in _EVERYWHERE:
                self._by_listed.setdefault(resource, set()).add(node.name)
        if node.topology is None:
            return
        self._by_gpus.setdefault(node.free_whole_gpus, set()).add(node.name)
        self._by_room.setdefault(_room(node), set()).add(node.name)
        for profile, free in node.free_mig.items():
            if free:
                self._by_mig.setdefault(profile, set()).add(node.name)

    def discard(self, node: NodeInfo) -> None:
        self._total -= 1
        for resource in node.allocatable:
            if resource not in _EVERYWHERE:
                self._by_listed.get(resource, set()).discard(node.name)
        if node.topology is None:
            return
        self._by_gpus.get(node.free_whole_gpus, set()).discard(node.name)
        self._by_room.get(_room(node), set()).discard(node.name)
        for profile in node.free_mig:
            self._by_mig.get(profile, set()).discard(node.name)

    def with_free_gpus(self, count: int) -> set[str] | None:
        """Nodes with at least ``count`` free whole GPUs (``None``: too many to narrow to)."""
        buckets = [names for free, names in self._by_gpus.items() if free >= count]
        if sum(map(len, buckets)) > self._total * _SELECTIVE:
            return None
        return set().union(*buckets)

    def with_share_room(self, milli: int) -> set[str] | None:
        """Nodes with a GPU that has at least ``milli`` thousandths free for a share (``None``:
        too many to narrow to)."""
        buckets = [names for room, names in self._by_room.items() if room >= milli]
        if sum(map(len, buckets)) > self._total * _SELECTIVE_SHARE:
            return None
        return set().union(*buckets)

    def with_free_mig(self, profiles: Iterable[str]) -> set[str] | None:
        """Nodes with a free instance of each MIG profile (``None``: too many to narrow to)."""
        out: set[str] | None = None
        for profile in profiles:
            names = self._by_mig.get(profile, set())
            out = set(names) if out is None else out & names
        if out is None or len(out) > self._total * _SELECTIVE:
            return None
        return out

    def listing(self, resources: Iterable[str]) -> set[str] | None:
        """Nodes whose allocatable lists every one of ``resources`` (those every node lists,
        cpu, memory, pods and ephemeral-storage, are not looked at; ``None``: none other is
        asked, or too many nodes list them to narrow to)."""
        listed = [self._by_listed.get(r, _NONE) for r in resources if r not in _EVERYWHERE]
        if not listed:
            return None
        fewest = min(listed, key=len)
        if len(fewest) > self._total * _SELECTIVE:
            return None
        return set(fewest).intersection(*listed)
