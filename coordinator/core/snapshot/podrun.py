"""A node's pods as one :class:`~.nodeinfo.NodeInfo` holds them (:class:`PodRun`), shared with
the versions of that node it was extended from.

Each assumed pod and each bind seen makes a new ``NodeInfo``; copying the node's pod tuple for
each was O(pods on the node) twice per pod (the copy, then freeing the old one), which on the one
node of a DaemonSet or of scheduler_perf's gated cases — thousands of pods — was most of what the
snapshot cost. A run is a prefix of a list that only ever grows at its end: extending the newest
version appends to the same list, and a version is the list's first ``len`` items, so no version
sees what was appended after it. What an older version adds is shared when it is what follows
it in the list already (the bind seen of the pod assumed next: the node as assumed), else kept
as the version's own short tail, copied into a list of its own only past :data:`_TAIL_MAX` pods
(binds seen out of order, the pods assumed meanwhile). A pod leaving starts a new list (the
view's one copy of the node's pods, :meth:`of_list`). The node as assumed is the inventory's
node with a tail (:meth:`joined`), so the inventory's stays the newest of its list and the next
bind seen is appended there. The tuple a reader gets (``NodeInfo.pods``) is made on first read
and kept.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain, islice
from operator import is_
from typing import Final

from coordinator.core.snapshot.podinfo import PodInfo

__all__ = ["PodRun"]

#: Pods a run keeps after its part of the shared list before it copies them into a list of its
#: own: what is assumed on a node while binds are seen out of order (a copy of the node's pods
#: every this many changes, not at each).
_TAIL_MAX: Final = 64


class PodRun:
    """The first ``count`` items of a list shared with the runs extended from this one, then a
    short tuple of its own (``tail``): the pods added where the list had moved on."""

    __slots__ = ("_count", "_items", "_tail", "_tuple")

    def __init__(self, pods: tuple[PodInfo, ...] = ()) -> None:
        self._items: list[PodInfo] | None = None  # made at the first extension
        self._count = len(pods)
        self._tail: tuple[PodInfo, ...] = ()
        self._tuple: tuple[PodInfo, ...] | None = pods

    @classmethod
    def of_list(cls, items: list[PodInfo]) -> PodRun:
        """A run of ``items``, a list the caller hands over (and never changes again)."""
        return cls._on(items, len(items))

    @classmethod
    def _on(cls, items: list[PodInfo], count: int, tail: tuple[PodInfo, ...] = ()) -> PodRun:
        run = cls.__new__(cls)
        run._items = items
        run._count = count
        run._tail = tail
        run._tuple = None
        return run

    def __len__(self) -> int:
        return self._count + len(self._tail)

    def __iter__(self) -> Iterator[PodInfo]:
        if self._tuple is not None:
            return iter(self._tuple)
        assert self._items is not None
        if self._tail:
            return chain(islice(self._items, self._count), self._tail)
        return islice(self._items, self._count)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PodRun):
            return NotImplemented
        return self is other or self.pods() == other.pods()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PodRun({self.pods()!r})"

    def pods(self) -> tuple[PodInfo, ...]:
        """The pods as a tuple (made once, then kept)."""
        out = self._tuple
        if out is None:
            items, count = self._items, self._count
            assert items is not None
            out = tuple(items if len(items) == count else items[:count]) + self._tail
            self._tuple = out
        return out

    def after(self, start: int) -> tuple[PodInfo, ...]:
        """The pods from the ``start``-th on, without making the whole tuple."""
        if self._tuple is not None:
            return self._tuple[start:]
        count = self._count
        if start >= count:
            return self._tail[start - count :]
        assert self._items is not None
        return tuple(self._items[start:count]) + self._tail

    def extended(self, pods: Sequence[PodInfo]) -> PodRun:
        """These pods followed by ``pods``: in place when this run is the newest of its list,
        shared when ``pods`` are what its list holds next, else kept as its own short tail (and
        copied into a list of their own only when that grows past :data:`_TAIL_MAX`)."""
        if not pods:
            return self
        return self._with_tail(self._tail + tuple(pods), fold=True)

    def joined(self, pods: Sequence[PodInfo]) -> PodRun:
        """These pods followed by ``pods``, leaving this run's list as it is (this run stays the
        newest of its list, to be extended in place: the node as the inventory shows it, while
        the node as assumed — it and the pods assumed there — goes its own way)."""
        return self._with_tail(self._tail + tuple(pods), fold=False)

    def _with_tail(self, tail: tuple[PodInfo, ...], *, fold: bool) -> PodRun:
        items, count = self._items, self._count
        if items is None:  # built from a tuple: the list starts here (one copy), shared by this
            assert self._tuple is not None  # run too (what follows it is found there next time)
            items = self._items = list(self._tuple)
        k = len(tail)
        if fold and len(items) == count:  # the newest: appended in place
            items.extend(tail)
            return PodRun._on(items, count + k)
        if fold and len(items) >= count + k and all(map(is_, items[count : count + k], tail)):
            return PodRun._on(items, count + k)  # already next in the list
        if k > _TAIL_MAX:
            return PodRun.of_list([*items[:count], *tail])
        return PodRun._on(items, count, tail)
