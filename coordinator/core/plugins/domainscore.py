"""Scores by the node's network domain (its leaf): how busy it is, and how it behaved lately.

``DomainUtilisation`` (the seeds' ``domainUtilization``): the share of the leaf's GPU slots in
use, counted over every node of the leaf, after this pod. With ``packing: binpack`` a busier leaf
scores higher (work gathers in leaves already in use, whole leaves stay free for gangs); with
``spread`` an emptier leaf does. The snapshot keeps the slots per leaf current
(:meth:`~coordinator.core.snapshot.snapshot.Snapshot.domain_slots`), and the plugin scores a
batch of nodes at once (``score_nodes``), each leaf once. A node in no leaf (or with an empty
leaf value) scores 0; a cluster without leaf labels, or a pod that asks for no GPU, is not
scored.

``HistoricalPerformance`` (the seeds' ``historicalPerformance``): every bind failure and gang
recovery on a node is remembered in a :class:`DomainHistory` with a weight that halves every
``historyHalfLifeSeconds`` (600 s by default). A node's penalty is its own recent events plus its
leaf's (so a flaky node counts twice, its leaf-mates once); its score is ``100 / (1 + penalty)``.
With nothing remembered, nothing is scored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.plugins.declaration import DEFAULT_LEAF_LABEL, PluginSpec
from coordinator.core.plugins.packingmode import PackingArgs
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.domainslots import DomainSlots
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = ["DomainHistory", "DomainUtilisation", "HistoricalPerformance"]

_LEAF_SLOTS: Final = StateKey[tuple[DomainSlots, int]]("leaf-slots")
_PENALTY: Final = StateKey[dict[str, float]]("history-penalty")
_FORGET_BELOW: Final = 0.01  # an event weighing less than this is dropped


class DomainUtilisation(Plugin):
    name = "DomainUtilisation"

    def __init__(
        self, args: PackingArgs | None = None, leaf_label: str = DEFAULT_LEAF_LABEL
    ) -> None:
        self.spread = (args or PackingArgs()).spread
        self.leaf_label = leaf_label

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        if not pod.wants_devices:
            return SKIP
        # Slots per leaf are kept current by the snapshot (not summed over the leaves' nodes
        # here); every node of a leaf scores alike, so each leaf is scored once per cycle.
        slots = snapshot.domain_slots(self.leaf_label)
        if not slots.total:
            return SKIP
        state.write(_LEAF_SLOTS, (slots, pod.gpus + pod.mig_count))
        return SUCCESS

    def score_nodes(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo]
    ) -> list[float]:
        slots, wanted = state.read(_LEAF_SLOTS)
        key = self.leaf_label
        leaves = [n.labels.get(key) for n in nodes]
        by_leaf = {leaf: self._leaf_score(slots, leaf, wanted) for leaf in set(leaves)}
        return [by_leaf[leaf] for leaf in leaves]

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        slots, wanted = state.read(_LEAF_SLOTS)
        return self._leaf_score(slots, node.labels.get(self.leaf_label), wanted)

    def _leaf_score(self, slots: DomainSlots, leaf: str | None, wanted: int) -> float:
        if not leaf:  # no leaf (or an empty value)
            return 0.0
        total = slots.total.get(leaf, 0)
        if not total:
            return 0.0
        share: float = 100.0 * min(total, slots.used[leaf] + wanted) / total
        return 100.0 - share if self.spread else share


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


class HistoricalPerformance(Plugin):
    name = "HistoricalPerformance"

    def __init__(
        self, history: DomainHistory | None = None, leaf_label: str = DEFAULT_LEAF_LABEL
    ) -> None:
        self.leaf_label = leaf_label
        self.history = history or DomainHistory()

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


DOMAIN_UTILISATION: Final = PluginSpec(
    plugin=DomainUtilisation,
    args=PackingArgs,
    factory=lambda args, c: DomainUtilisation(args, c.leaf_label),
    weight=2,
    weight_key="domain_utilisation",
)


HISTORICAL_PERFORMANCE: Final = PluginSpec[None](
    plugin=HistoricalPerformance,
    factory=lambda _, c: HistoricalPerformance(c.history, c.leaf_label),
    weight=1,
    weight_key="historical_performance",
)
