"""What a node costs: the ``scheduling.prices`` table and the well-known labels it is keyed by.

::

    prices:
      instanceTypes:                       # node.kubernetes.io/instance-type → $/hour
        p4d.24xlarge: 32.77                # a number: the on-demand price
        p3dn.24xlarge: {onDemand: 31.21, spot: 9.36}
      gpuModels:                           # fallback: $/hour per GPU, by the node's GPU model
        A100: 4.10
        H100: {onDemand: 6.98, spot: 2.50}
      spotFactor: 0.35                     # spot = onDemand × this where a row gives no spot

A node's price is its instance type's row, else its GPU model's row times its GPU count (the
longest key found in the node's GPU product name wins: ``A100-80GB`` before ``A100``), else
unknown. Its capacity type comes from ``karpenter.sh/capacity-type`` (``spot``/``on-demand``) or
``eks.amazonaws.com/capacityType`` (``SPOT``/``ON_DEMAND``). The table is read (negative or
non-numeric prices refused, naming the entry) by :mod:`coordinator.app.config.prices`; the
CostEfficiency scorer and the AgentPool controller's ``maxCostPerHour`` check
(``coordinator/neuronetes/decide/policy/cost.py``) use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "CAPACITY_TYPE_LABELS",
    "INSTANCE_TYPE_LABEL",
    "ON_DEMAND",
    "REGION_LABEL",
    "SPOT",
    "Price",
    "PriceTable",
    "capacity_type",
    "gpu_product",
]

INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
REGION_LABEL: Final = "topology.kubernetes.io/region"
CAPACITY_TYPE_LABELS: Final = ("karpenter.sh/capacity-type", "eks.amazonaws.com/capacityType")
SPOT: Final = "spot"
ON_DEMAND: Final = "on-demand"
_CAPACITY_VALUES: Final = {
    "spot": SPOT,
    "on-demand": ON_DEMAND,
    "SPOT": SPOT,
    "ON_DEMAND": ON_DEMAND,
}
#: Labels naming a node's GPU model, most specific first (GFD, the agent's, the guide's).
_GPU_PRODUCT_LABELS: Final = (
    "nvidia.com/gpu.product",
    "topos.io/gpu.product",
    "neuronetes.io/gpu-type",
)


def capacity_type(labels: Mapping[str, str]) -> str | None:
    """``spot``, ``on-demand``, or ``None`` when no well-known label says."""
    for key in CAPACITY_TYPE_LABELS:
        value = _CAPACITY_VALUES.get(labels.get(key, ""))
        if value is not None:
            return value
    return None


def gpu_product(labels: Mapping[str, str]) -> str:
    for key in _GPU_PRODUCT_LABELS:
        value = labels.get(key)
        if value:
            return value
    return ""


@dataclass(frozen=True, slots=True)
class Price:
    """$/hour on demand, and on spot when known."""

    on_demand: float
    spot: float | None = None


@dataclass(frozen=True, slots=True)
class PriceTable:
    instance_types: Mapping[str, Price] = field(default_factory=dict)
    gpu_models: Mapping[str, Price] = field(default_factory=dict)
    spot_factor: float | None = None

    @property
    def empty(self) -> bool:
        return not self.instance_types and not self.gpu_models

    def node_price(
        self, labels: Mapping[str, str], gpus: int, *, spot: bool | None = None
    ) -> float | None:
        """$/hour of a node with these labels and ``gpus`` GPUs (``None``: not in the table).
        ``spot`` overrides the capacity type the labels give."""
        on_spot = capacity_type(labels) == SPOT if spot is None else spot
        row = self.instance_types.get(labels.get(INSTANCE_TYPE_LABEL, ""))
        times = 1
        if row is None:
            row = self._gpu_row(gpu_product(labels))
            times = gpus
            if row is None or gpus <= 0:
                return None
        return self._of(row, on_spot) * times

    def _of(self, row: Price, on_spot: bool) -> float:
        if not on_spot:
            return row.on_demand
        if row.spot is not None:
            return row.spot
        return row.on_demand * (self.spot_factor if self.spot_factor is not None else 1.0)

    def _gpu_row(self, product: str) -> Price | None:
        if not product:
            return None
        exact = self.gpu_models.get(product)
        if exact is not None:
            return exact
        low = product.lower()
        found = [k for k in self.gpu_models if k.lower() in low]
        return self.gpu_models[max(found, key=len)] if found else None
