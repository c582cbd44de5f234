"""Scores by the node's network domain (its leaf): how busy it is, and how it behaved lately.

``DomainUtilisation`` (the seeds' ``domainUtilization``): the share of the leaf's GPU slots in
use, counted over every node of the leaf, after this pod. With ``packing: binpack`` a busier leaf
scores higher (work gathers in leaves already in use, whole leaves stay free for gangs); with
``spread`` an emptier leaf does. A node in no leaf scores 0; a cluster without leaf labels, or a
pod that asks for no GPU, is not scored.

``HistoricalPerformance`` (the seeds' ``historicalPerformance``): every bind failure and gang
recovery on a node is remembered in a :class:`DomainHistory` with a weight that halves every
``historyHalfLifeSeconds`` (600 s by default). A node's penalty is its own recent events plus its
leaf's (so a flaky node counts twice, its leaf-mates once); its score is ``100 / (1 + penalty)``.
With nothing remembered, nothing is scored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = ["DomainHistory", "DomainUtilisation", "HistoricalPerformance"]

_LEAF_SCORE: Final = StateKey[dict[str, float]]("leaf-score")
_PENALTY: Final = StateKey[dict[str, float]]("history-penalty")
_FORGET_BELOW: Final = 0.01  # an event weighing less than this is dropped


class DomainUtilisation:
    name = "DomainUtilisation"

    def __init__(self, config: SchedulerConfig) -> None:
        self.spread = config.packing == "spread"
        self.leaf_label = config.leaf_label
        self._inverse: tuple[Mapping[str, str], Mapping[str, tuple[str, ...]]] | None = None

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        if not pod.wants_devices:
            return SKIP
        leaves = snapshot.domains(self.leaf_label)
        if not leaves:
            return SKIP
        members = self._members(leaves)
        wanted = pod.gpus + pod.mig_count
        scores: dict[str, float] = {}
        # Only the leaves of the nodes being scored: a cycle that stopped early (kube's
        # percentage) looks at their leaves, not at the whole cluster. Every node of a leaf
        # scores alike, so the score is worked out once per leaf here.
        for leaf in {leaves.get(n.name) for n in nodes}:
            if leaf is None:
                continue
            total = used = 0
            for name in members[leaf]:
                info = snapshot.get(name)
                if info is not None:
                    total += info.gpu_slots
                    used += min(info.gpu_slots, info.gpu_slots_used)
            if total:
                share = 100.0 * min(total, used + wanted) / total
                scores[leaf] = 100.0 - share if self.spread else share
        state.write(_LEAF_SCORE, scores)
        return SUCCESS

    def _members(self, leaves: Mapping[str, str]) -> Mapping[str, tuple[str, ...]]:
        """Leaf → its nodes, rebuilt only when the snapshot's node → leaf mapping is a new one
        (labels changed, or another snapshot)."""
        if self._inverse is None or self._inverse[0] is not leaves:
            grouped: dict[str, list[str]] = {}
            for name, leaf in leaves.items():
                grouped.setdefault(leaf, []).append(name)
            self._inverse = (leaves, {k: tuple(v) for k, v in grouped.items()})
        return self._inverse[1]

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        return state.read(_LEAF_SCORE).get(node.labels.get(self.leaf_label) or "", 0.0)


class DomainHistory:
    """Recent trouble per node (bind failures, gang recoveries), fading with a half-life."""

    def __init__(self, *, half_life_s: float = 600.0, clock: Callable[[], float] | None = None):
        self.half_life_s = half_life_s
        self._clock = clock or time.monotonic
        self._events: dict[str, list[float]] = {}

    def record(self, nodes: Iterable[str]) -> None:
        """One event on each of ``nodes``, now."""
        now = self._clock()
        for node in nodes:
            self._events.setdefault(node, []).append(now)

    def weights(self) -> dict[str, float]:
        """Node → the summed weight of its events now (forgotten ones dropped)."""
        now = self._clock()
        out: dict[str, float] = {}
        for node in list(self._events):
            kept = [t for t in self._events[node] if self._weight(now - t) >= _FORGET_BELOW]
            if kept:
                self._events[node] = kept
                out[node] = sum(self._weight(now - t) for t in kept)
            else:
                del self._events[node]
        return out

    def _weight(self, age: float) -> float:
        return math.pow(0.5, max(0.0, age) / self.half_life_s)


class HistoricalPerformance:
    name = "HistoricalPerformance"

    def __init__(self, config: SchedulerConfig, history: DomainHistory | None = None) -> None:
        self.leaf_label = config.leaf_label
        self.history = history or DomainHistory(half_life_s=config.history_half_life_s)

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        per_node = self.history.weights()
        if not per_node:
            return SKIP
        leaves = snapshot.domains(self.leaf_label)
        per_leaf: dict[str, float] = {}
        for node, weight in per_node.items():
            leaf = leaves.get(node)
            if leaf is not None:
                per_leaf[leaf] = per_leaf.get(leaf, 0.0) + weight
        penalty = {
            n.name: per_node.get(n.name, 0.0) + per_leaf.get(leaves.get(n.name, "\0"), 0.0)
            for n in nodes
        }
        state.write(_PENALTY, penalty)
        return SUCCESS

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        return 100.0 / (1.0 + state.read(_PENALTY).get(node.name, 0.0))
