"""Which GPUs of one node a pod should get.

Among the free GPUs allowed (healthy, not MIG-partitioned, enough memory, on the NUMA nodes the
NUMA policy allows) pick the set of the requested size that, in order:

1. satisfies the locality (``nvlink``: every pair joined by NVLink/NVSwitch; ``same-socket``: one
   NUMA node, or no ``SYS`` link where NUMA is unknown; ``same-node``/``any``: nothing more);
2. has the best *worst* link class (NVLink before PIX before PXB before PHB before NODE before SYS);
3. leaves the largest intact groups free afterwards: the biggest fully NVLink-connected group of
   remaining free GPUs and how many free GPUs still have an NVLink partner, then the same for
   PIX, PXB, PHB and NODE (anti-fragmentation: on a DGX-1 hybrid cube-mesh a 1-GPU pod goes
   where it leaves the other quad whole; on a PCIe box it takes the partner of a busy GPU);
4. has the most NVLinks on its worst pair, then in total;
5. has the lowest indices (determinism).

Sets are enumerated exhaustively when there are at most :data:`EXHAUSTIVE_LIMIT` of them (every
request on an 8-GPU node); beyond that (16-GPU nodes, large requests) candidates are grown greedily
from each seed GPU. Results are memoised per topology and free-GPU set, which is what makes a
1,000-node cycle cheap: most nodes share a handful of topologies and occupancy patterns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations, count
from math import comb
from typing import Final

from common.linkhealth import degraded_pairs, effective_link
from common.model import Link, NodeTopology

__all__ = ["EXHAUSTIVE_LIMIT", "GpuChoice", "TopologyIndex", "topology_index"]

EXHAUSTIVE_LIMIT: Final = 3000
# Link ranks in common.model: X 0, NV 1, PIX 2, PXB 3, PHB 4, NODE 5, SYS 6.
_GROUP_LEVELS: Final = (1, 2, 3, 4, 5)
_SYS: Final = 6
_IDENTS = count()


@dataclass(frozen=True, slots=True)
class GpuChoice:
    gpus: tuple[int, ...]
    worst: Link
    groups_left: tuple[int, ...]  # per level (NV, PIX, PXB, PHB, NODE): largest group, paired

    @property
    def link_class(self) -> str:
        return str(self.worst) if self.worst.kind != "NV" else "NV"


class TopologyIndex:
    """Precomputed adjacency of one node topology, with memo tables."""

    __slots__ = (
        "_choice_memo",
        "_clique_memo",
        "ident",
        "level_adj",
        "link",
        "memory",
        "n",
        "numa_of",
    )

    def __init__(self, topology: NodeTopology) -> None:
        #: Unique in the process: memo keys name the index by it (an int keeps a key of ints
        #: out of the garbage collector's reach; the index itself would not).
        self.ident = next(_IDENTS)
        n = self.n = len(topology.gpus)
        # A pair whose NVLink the agent judged degraded counts as its fallback class
        # (common/linkhealth.py): the choice, its locality and its score all see that.
        self.link: list[list[Link]] = [
            [effective_link(topology, i, j) for j in range(n)] for i in range(n)
        ]
        self.level_adj: dict[int, list[int]] = {}
        for level in (*_GROUP_LEVELS, _SYS):
            adj = []
            for i in range(n):
                mask = 0
                for j in range(n):
                    if i != j and self.link[i][j].rank <= level:
                        mask |= 1 << j
                adj.append(mask)
            self.level_adj[level] = adj
        self.numa_of: list[int | None] = [g.numa_node for g in topology.gpus]
        self.memory: list[int | None] = [g.memory_total_mib for g in topology.gpus]
        self._clique_memo: dict[tuple[int, int], int] = {}
        self._choice_memo: dict[tuple[int, int, str], GpuChoice | None] = {}

    # --- building blocks ---------------------------------------------------------------------
    def worst(self, gpus: tuple[int, ...]) -> Link:
        worst = Link("X")
        wkey = worst.sort_key()
        for a in range(len(gpus)):
            row = self.link[gpus[a]]
            for b in range(a + 1, len(gpus)):
                link = row[gpus[b]]
                key = link.sort_key()
                if key > wkey:
                    worst, wkey = link, key
        return worst

    def clique(self, level: int, mask: int) -> int:
        """Size of the largest group in ``mask`` whose every pair is at ``level`` or closer."""
        memo_key = (level, mask)
        cached = self._clique_memo.get(memo_key)
        if cached is not None:
            return cached
        adj = self.level_adj[level]
        best = 0

        def expand(cand: int, size: int) -> None:
            nonlocal best
            if cand == 0:
                best = max(best, size)
                return
            if size + cand.bit_count() <= best:
                return
            while cand:
                low = cand & -cand
                i = low.bit_length() - 1
                expand(cand & adj[i], size + 1)
                cand &= ~low
                if size + cand.bit_count() <= best:
                    return

        expand(mask, 0)
        self._clique_memo[memo_key] = best
        return best

    def paired(self, level: int, mask: int) -> int:
        """How many GPUs in ``mask`` still have a partner in ``mask`` at ``level`` or closer."""
        adj = self.level_adj[level]
        return sum(1 for i in range(self.n) if mask >> i & 1 and adj[i] & mask)

    def groups(self, mask: int) -> tuple[int, ...]:
        """Per level (NV, PIX, PXB, PHB, NODE): the largest intact group left in ``mask`` and
        how many GPUs still have a partner — bigger is less fragmented."""
        out: list[int] = []
        for level in _GROUP_LEVELS:
            out.append(self.clique(level, mask))
            out.append(self.paired(level, mask))
        return tuple(out)

    def _satisfies(self, gpus: tuple[int, ...], locality: str, worst: Link) -> bool:
        if len(gpus) < 2 or locality in ("any", "same-node"):
            return True
        if locality == "nvlink":
            return worst.kind == "NV"
        # same-socket: one NUMA node where known, else no SYS hop between any two GPUs
        numas = {self.numa_of[i] for i in gpus}
        if None not in numas:
            return len(numas) == 1
        return worst.rank < _SYS

    def _candidates(self, free: tuple[int, ...], count: int) -> Iterable[tuple[int, ...]]:
        if comb(len(free), count) <= EXHAUSTIVE_LIMIT:
            yield from combinations(free, count)
            return
        seen: set[tuple[int, ...]] = set()
        for seed in free:
            chosen = [seed]
            rest = [i for i in free if i != seed]
            while len(chosen) < count:
                # add the GPU whose worst link to the set is best (then the lowest index)
                best = min(
                    rest,
                    key=lambda j: (max(self.link[c][j].sort_key() for c in chosen), j),
                )
                chosen.append(best)
                rest.remove(best)
            cand = tuple(sorted(chosen))
            if cand not in seen:
                seen.add(cand)
                yield cand
        lowest = free[:count]
        if lowest not in seen:
            yield lowest

    # --- the choice --------------------------------------------------------------------------
    def choose(self, free_mask: int, count: int, locality: str) -> GpuChoice | None:
        """The best ``count`` GPUs among ``free_mask`` for ``locality`` (``None``: impossible)."""
        memo_key = (free_mask, count, locality)
        if memo_key in self._choice_memo:
            return self._choice_memo[memo_key]
        free = tuple(i for i in range(self.n) if free_mask >> i & 1)
        best: GpuChoice | None = None
        best_key: tuple[object, ...] | None = None
        if 0 < count <= len(free):
            for gpus in self._candidates(free, count):
                worst = self.worst(gpus)
                if not self._satisfies(gpus, locality, worst):
                    continue
                rank = worst.rank
                if best_key is not None and rank > best_key[0]:  # type: ignore[operator]
                    continue
                left = free_mask
                for i in gpus:
                    left &= ~(1 << i)
                groups = self.groups(left)
                total_nv = sum(
                    self.link[gpus[a]][gpus[b]].nvlinks
                    for a in range(len(gpus))
                    for b in range(a + 1, len(gpus))
                )
                key = (rank, tuple(-g for g in groups), -worst.nvlinks, -total_nv, gpus)
                if best_key is None or key < best_key:
                    best_key = key
                    best = GpuChoice(gpus, worst, groups)
        if len(self._choice_memo) > 50_000:
            self._choice_memo.clear()
        self._choice_memo[memo_key] = best
        return best


_BY_OBJECT: dict[int, tuple[NodeTopology, TopologyIndex]] = {}
_BY_SHAPE: dict[tuple[object, ...], TopologyIndex] = {}


def topology_index(topology: NodeTopology) -> TopologyIndex:
    """The memoised index of a topology. Nodes with the same hardware shape (link matrix,
    degraded NVLink pairs, GPU NUMA nodes and memory) share one index and its memo tables,
    whatever their names and UUIDs."""
    hit = _BY_OBJECT.get(id(topology))
    if hit is not None and hit[0] is topology:
        return hit[1]
    if len(_BY_OBJECT) > 50_000:
        _BY_OBJECT.clear()
    shape = (
        topology.links,
        tuple(sorted(degraded_pairs(topology))),
        tuple(g.numa_node for g in topology.gpus),
        tuple(g.memory_total_mib for g in topology.gpus),
    )
    index = _BY_SHAPE.get(shape)
    if index is None:
        if len(_BY_SHAPE) > 1000:
            _BY_SHAPE.clear()
        index = _BY_SHAPE[shape] = TopologyIndex(topology)
    _BY_OBJECT[id(topology)] = (topology, index)
    return index
