"""Fragmentation Gradient Descent (Weng et al., ATC'23), written for this benchmark.

The paper's measure: a node's free GPU milli is *fragmented for a pod shape* when that shape
cannot use it — all of it when the shape cannot run on the node at all (too little CPU left, or
fewer GPUs with enough free milli than it needs) or asks for no GPU; otherwise the free milli of
each GPU with less free than the shape asks per GPU (1,000 for a whole GPU). A node's expected
fragmentation is the sum over the target workload's shapes of popularity × fragmented milli.
FGD places each pod where that expected fragmentation grows least — over every node that fits,
and for a fractional pod over every GPU there that holds it. Memory is checked for fit but is
not part of the measure (as in the paper).

Speed: a node's fragmentation depends only on its sorted free milli per GPU and on which shapes'
CPU asks its free CPU covers, so both it and the growth a pod shape causes are memoised per node
state (nodes in the same state share the work).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence

from benchmarks.sharing.cluster import Choice, Cluster, NodeState
from benchmarks.sharing.trace import MILLI, PodShape

__all__ = ["Fgd"]

_State = tuple[tuple[int, ...], int]  # sorted free milli per GPU, free CPU (milli)


class Fgd:
    """FGD for one target workload: ``target`` is (shape, popularity) with popularities summing
    to 1 (:func:`~benchmarks.sharing.trace.popularity`)."""

    def __init__(self, target: Sequence[tuple[PodShape, float]]) -> None:
        self.cpu_steps = sorted({s.cpu_milli for s, _ in target})
        # per (GPUs, milli per GPU): the (CPU step index, popularity) of the shapes asking it
        groups: dict[tuple[int, int], list[tuple[int, float]]] = {}
        cpu_only = 0.0
        for shape, share in target:
            if shape.gpus == 0:
                cpu_only += share
            else:
                step = bisect.bisect_left(self.cpu_steps, shape.cpu_milli)
                groups.setdefault((shape.gpus, shape.gpu_milli), []).append((step, share))
        self.cpu_only = cpu_only
        self.groups = [(g, m, sorted(v)) for (g, m), v in sorted(groups.items())]
        self._ids: dict[_State, int] = {}
        self._states: list[_State] = []
        self._frag: dict[tuple[tuple[int, ...], int], float] = {}
        self._growth: dict[tuple[int, PodShape, int], tuple[float, int]] = {}

    # --- the measure ---------------------------------------------------------------------------

    def fragmentation(self, free: tuple[int, ...], cpu_left: int) -> float:
        """Expected fragmented GPU milli of a node with ``free`` (sorted) and ``cpu_left``."""
        covered = bisect.bisect_right(self.cpu_steps, cpu_left)  # CPU steps the node still has
        key = (free, covered)
        value = self._frag.get(key)
        if value is None:
            value = self._measure(free, covered)
            self._frag[key] = value
        return value

    def _measure(self, free: tuple[int, ...], covered: int) -> float:
        total = sum(free)
        if total == 0:
            return 0.0
        value = self.cpu_only * total
        for gpus, milli, shapes in self.groups:
            below = bisect.bisect_left(free, milli)  # GPUs with less than milli free
            # usable by the shape: only the GPUs with too little free are lost to it
            usable = len(free) - below >= gpus
            lost = float(sum(free[:below])) if usable else float(total)
            for step, share in shapes:
                value += share * (lost if step < covered else total)
        return value

    # --- the policy ----------------------------------------------------------------------------

    def _state_id(self, node: NodeState) -> int:
        if node.key is None:
            state = (tuple(sorted(node.free)), node.cpu_left)
            sid = self._ids.get(state)
            if sid is None:
                sid = self._ids[state] = len(self._states)
                self._states.append(state)
            node.key = sid
        return node.key

    def growth(self, sid: int, shape: PodShape, per: int) -> tuple[float, int]:
        """How much placing ``shape`` (``per`` milli per GPU) grows the fragmentation of a node
        in state ``sid``, and the free milli of the GPU a fractional pod should take there
        (0 for whole GPUs: any idle ones)."""
        memo = (sid, shape, per)
        found = self._growth.get(memo)
        if found is not None:
            return found
        free, cpu_left = self._states[sid]
        before = self.fragmentation(free, cpu_left)
        cpu_after = cpu_left - shape.cpu_milli
        if shape.gpus == 0:
            result = (self.fragmentation(free, cpu_after) - before, 0)
        elif per == MILLI:
            after = list(free)
            for _ in range(shape.gpus):
                after.remove(MILLI)
            grown = self.fragmentation(tuple(sorted([*after, *[0] * shape.gpus])), cpu_after)
            result = (grown - before, 0)
        else:
            best: tuple[float, int] | None = None
            for value in sorted(set(free)):
                if value < per:
                    continue
                after = list(free)
                after.remove(value)
                grown = self.fragmentation(tuple(sorted([*after, value - per])), cpu_after)
                if best is None or grown - before < best[0]:
                    best = (grown - before, value)
            assert best is not None, "growth of a node that cannot hold the pod"
            result = best
        self._growth[memo] = result
        return result

    def __call__(self, cluster: Cluster, shape: PodShape, rng: random.Random) -> Choice | None:
        per = cluster.per_gpu(shape)
        best: list[tuple[NodeState, int]] = []
        best_growth = 0.0
        for node in cluster.nodes:
            if not node.fits(shape, per):
                continue
            grown, value = self.growth(self._state_id(node), shape, per)
            if not best or grown < best_growth:
                best_growth, best = grown, [(node, value)]
            elif grown == best_growth:
                best.append((node, value))
        if not best:
            return None
        node, value = best[0] if len(best) == 1 else rng.choice(best)
        if shape.gpus == 0:
            return Choice(node.index)
        if per == MILLI:
            return Choice(node.index, tuple(node.usable(MILLI)[: shape.gpus]))
        return Choice(node.index, (node.free.index(value),))
