"""A node's pods as one :class:`~.nodeinfo.NodeInfo` holds them (:class:`PodRun`), shared with
the versions of that node it was extended from.

Each assumed pod and each bind seen makes a new ``NodeInfo``; copying the node's pod tuple for
each was O(pods on the node) twice per pod (the copy, then freeing the old one), which on the one
node of a DaemonSet or of scheduler_perf's gated cases — thousands of pods — was most of what the
snapshot cost. A run is a prefix of a list that only ever grows at its end: extending the newest
version appends to the same list, and a version is the list's first ``len`` items, so no version
sees what was appended after it. Extending an older version copies (the list has moved on), unless
what it adds is what follows it in the list already (the bind seen of the pod assumed next: the
node as assumed is shared). A pod leaving starts a new list (the view's one copy of the node's
pods, :meth:`of_list`), and the pods assumed there are appended to it, not copied with it. The
tuple a reader gets (``NodeInfo.pods``) is made on first read and kept.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from operator import is_

from coordinator.core.snapshot.podinfo import PodInfo

__all__ = ["PodRun"]


class PodRun:
    """The first ``len(self)`` items of a list shared with the runs extended from this one."""

    __slots__ = ("_count", "_items", "_tuple")

    def __init__(self, pods: tuple[PodInfo, ...] = ()) -> None:
        self._items: list[PodInfo] | None = None  # made at the first extension
        self._count = len(pods)
        self._tuple: tuple[PodInfo, ...] | None = pods

    @classmethod
    def of_list(cls, items: list[PodInfo]) -> PodRun:
        """A run of ``items``, a list the caller hands over (and never changes again)."""
        return cls._prefix(items, len(items))

    @classmethod
    def _prefix(cls, items: list[PodInfo], count: int) -> PodRun:
        run = cls.__new__(cls)
        run._items = items
        run._count = count
        run._tuple = None
        return run

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[PodInfo]:
        if self._tuple is not None:
            return iter(self._tuple)
        assert self._items is not None
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
            items = self._items
            assert items is not None
            out = self._tuple = tuple(items if len(items) == self._count else items[: self._count])
        return out

    def after(self, start: int) -> tuple[PodInfo, ...]:
        """The pods from the ``start``-th on, without making the whole tuple."""
        if self._tuple is not None:
            return self._tuple[start:]
        assert self._items is not None
        return tuple(self._items[start : self._count])

    def extended(self, pods: Sequence[PodInfo]) -> PodRun:
        """These pods followed by ``pods``, in O(len(pods)) when this run is the list's newest
        or ``pods`` are what the list holds after it."""
        items, count, k = self._items, self._count, len(pods)
        if not k:
            return self
        if items is None:  # built from a tuple: the list starts here (one copy), shared by this
            assert self._tuple is not None  # run too (what follows it is found there next time)
            items = self._items = [*self._tuple, *pods]
            return PodRun._prefix(items, count + k)
        if len(items) == count:  # the newest: appended in place
            items.extend(pods)
            return PodRun._prefix(items, count + k)
        if len(items) >= count + k and all(map(is_, islice(items, count, count + k), pods)):
            return PodRun._prefix(items, count + k)  # already next in the list
        return PodRun._prefix([*islice(items, count), *pods], count + k)
