"""AgentPool scoring and filtering (NeuroNetes, issue 18): model cache, cost, region, carbon, spot.

They act only on pods that carry AgentPool keys (:mod:`coordinator.core.podspec.poolkeys`);
every other pod skips them. The weights are the ``agentPools`` profile's (``pool_weight`` in
their declarations below, ``agentPools`` in the configuration). Documented in
docs/neuronetes-policies.md.

- ``ModelCache``      100 where the node's cache (``topos.io/models``) holds the pod's model.
- ``CostEfficiency``  cheapest feasible node 100, others ``100 × cheapest / price`` — $/hour per
                      GPU for GPU pods, per node otherwise (``scheduling.prices``). A spot node
                      is priced at its spot price for pools with ``spotEnabled: true``; for other
                      pools it scores 0 (their pods go to spot only when nothing else fits). A
                      node with no price scores 0.
- ``PreferredRegion`` ``carbonAware.preferredRegions`` in order: the first 100, the last 100/n,
                      other regions 0 (``topology.kubernetes.io/region``).
- ``PoolPlacement``   (filter) a spot node for a pool with ``spotEnabled: false``; a node whose
                      region's current carbon intensity (:class:`CarbonReadings`) is above the
                      pool's ``maxCarbonIntensity``. A region with no reading passes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

from common.podkeys import GPU_RESOURCE
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.framework.prices import REGION_LABEL, SPOT, PriceTable, capacity_type
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.poolkeys import holds_model
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = [
    "CarbonReadings",
    "CostEfficiency",
    "ModelCache",
    "PoolPlacement",
    "PreferredRegion",
    "node_gpus",
]

_UNPRICED: Final = math.inf
_SPOT_REFUSED: Final = Status.unresolvable(
    "node(s) were spot nodes and the pool has spotEnabled: false"
)


class CarbonReadings:
    """The current carbon intensity (gCO2/kWh) per region, as the engine last heard it. The
    AgentPool controller's intensity source updates it; ``PoolPlacement`` reads it."""

    def __init__(self, values: Mapping[str, float] | None = None) -> None:
        self._values: dict[str, float] = dict(values or {})

    def update(self, values: Mapping[str, float]) -> None:
        """Replace the readings (regions not named are forgotten)."""
        self._values = dict(values)

    def get(self, region: str) -> float | None:
        return self._values.get(region)


def node_gpus(node: NodeInfo) -> int:
    if node.topology is not None:
        return len(node.topology.gpus)
    return node.allocatable.get(GPU_RESOURCE, 0)


class ModelCache(Plugin):
    name = "ModelCache"

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        return SUCCESS if pod.pool is not None and pod.pool.model else SKIP

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        assert pod.pool is not None
        return 100.0 if holds_model(node.cached_models, pod.pool.model) else 0.0

    def score_share(self, pod: PodRequest) -> float | None:
        """The pool's ``cacheAware.cacheHitWeight``: the cache's share of a node's total."""
        return pod.pool.cache_hit_weight if pod.pool is not None else None


class CostEfficiency(Plugin):
    name = "CostEfficiency"

    def __init__(self, prices: PriceTable | None = None) -> None:
        self.prices = prices or PriceTable()

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        return SKIP if pod.pool is None or self.prices.empty else SUCCESS

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        """The raw score is the price (lower is better); :meth:`normalize_scores` turns it round."""
        assert pod.pool is not None
        on_spot = capacity_type(node.labels) == SPOT
        if on_spot and pod.pool.spot_enabled is not True:
            return _UNPRICED
        gpus = node_gpus(node)
        price = self.prices.node_price(node.labels, gpus, spot=on_spot)
        if price is None:
            return _UNPRICED
        return price / gpus if pod.wants_devices and gpus > 0 else price

    def normalize_scores(
        self, state: CycleState, pod: PodRequest, scores: Sequence[float]
    ) -> list[float]:
        known = [v for v in scores if v != _UNPRICED]
        low = min(known) if known else 0.0
        return [
            0.0 if price == _UNPRICED else 100.0 if price <= low else 100.0 * low / price
            for price in scores
        ]


class PreferredRegion(Plugin):
    name = "PreferredRegion"

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        return SUCCESS if pod.pool is not None and pod.pool.preferred_regions else SKIP

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        assert pod.pool is not None
        regions = pod.pool.preferred_regions
        region = node.labels.get(REGION_LABEL)
        if region not in regions:
            return 0.0
        return 100.0 * (len(regions) - regions.index(region)) / len(regions)


class PoolPlacement(Plugin):
    """Spot nodes for pools that refuse spot; regions above a pool's carbon limit."""

    name = "PoolPlacement"

    def __init__(self, carbon: CarbonReadings | None = None) -> None:
        self.carbon = carbon or CarbonReadings()

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        pool = pod.pool
        if pool is None or (pool.spot_enabled is not False and pool.max_carbon_intensity is None):
            return SKIP
        return SUCCESS

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        pool = pod.pool
        assert pool is not None
        if pool.spot_enabled is False and capacity_type(node.labels) == SPOT:
            return _SPOT_REFUSED
        limit = pool.max_carbon_intensity
        region = node.labels.get(REGION_LABEL)
        if limit is None or region is None:
            return SUCCESS
        now = self.carbon.get(region)
        if now is None or now <= limit:
            return SUCCESS
        return Status.unresolvable(
            f"node(s) were in region {region} at {now:g} gCO2/kWh, above the pool's "
            f"maxCarbonIntensity {limit:g}"
        )


POOL_PLACEMENT: Final = PluginSpec[None](
    plugin=PoolPlacement, factory=lambda _, c: PoolPlacement(c.carbon)
)


MODEL_CACHE: Final = PluginSpec[None](
    plugin=ModelCache, weight=4, pool_weight=4, weight_key="model_cache"
)


COST_EFFICIENCY: Final = PluginSpec[None](
    plugin=CostEfficiency,
    factory=lambda _, c: CostEfficiency(c.prices),
    weight=3,
    pool_weight=3,
    weight_key="cost_efficiency",
)


PREFERRED_REGION: Final = PluginSpec[None](
    plugin=PreferredRegion, weight=2, weight_key="preferred_region"
)
