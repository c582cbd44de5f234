"""The snapshot's nodes in their stable order (:class:`NodeOrder`), stored in chunks that
successive versions share.

Every assume replaces one node, and a cycle's explanation keeps the order it saw (its verdicts
are judged when asked). As one tuple, each version was a fresh tuple of every node: at 5,000
nodes and 10,000 explanations kept, 400 MB of references the garbage collector walked again and
again. Replacing a node here copies one chunk and the short tuple of chunks; the rest is shared.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, islice
from typing import Final, overload

from coordinator.core.snapshot.nodeinfo import NodeInfo

__all__ = ["NodeOrder"]

_CHUNK: Final = 64


class NodeOrder(Sequence[NodeInfo]):
    """Nodes in order (immutable); :meth:`with_node` makes a version with one replaced."""

    __slots__ = ("_chunks", "_len")

    def __init__(self, nodes: Iterable[NodeInfo] = ()) -> None:
        flat = tuple(nodes)
        self._len = len(flat)
        self._chunks = tuple(flat[i : i + _CHUNK] for i in range(0, len(flat), _CHUNK))

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[NodeInfo]:
        return chain.from_iterable(self._chunks)

    @overload
    def __getitem__(self, index: int) -> NodeInfo: ...
    @overload
    def __getitem__(self, index: slice) -> list[NodeInfo]: ...
    def __getitem__(self, index: int | slice) -> NodeInfo | list[NodeInfo]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if step != 1:
                return list(self)[index]
            if stop <= start:
                return []
            first, offset = divmod(start, _CHUNK)
            parts = islice(self._chunks, first, (stop - 1) // _CHUNK + 1)
            return list(islice(chain.from_iterable(parts), offset, offset + stop - start))
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("node index out of range")
        return self._chunks[index // _CHUNK][index % _CHUNK]

    def changed_since(self, before: Sequence[NodeInfo]) -> list[NodeInfo] | None:
        """The nodes that are not the very objects at their place in ``before`` (an earlier
        version of this order: chunks not replaced since are skipped whole); ``None`` when
        nodes came, went or moved."""
        if not isinstance(before, NodeOrder) or before._len != self._len:
            return None
        out: list[NodeInfo] = []
        for now, then in zip(self._chunks, before._chunks, strict=True):
            if now is then:
                continue
            for a, b in zip(now, then, strict=True):
                if a is not b:
                    if a.name != b.name:
                        return None
                    out.append(a)
        return out

    def with_node(self, index: int, node: NodeInfo) -> NodeOrder:
        """This order with the node at ``index`` replaced by ``node``."""
        c, i = divmod(index, _CHUNK)
        chunk = self._chunks[c]
        other = NodeOrder.__new__(NodeOrder)
        other._len = self._len
        other._chunks = (
            *self._chunks[:c],
            (*chunk[:i], node, *chunk[i + 1 :]),
            *self._chunks[c + 1 :],
        )
        return other
