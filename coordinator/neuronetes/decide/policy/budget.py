"""``maxCostPerHour``: what a pool's pods cost per hour, from the nodes they run on.

::

    pool_cost(pods, nodes, prices, max_cost_per_hour=None) -> CostReport

``pods`` are ``PodCost(name, node, gpus)`` for the pool's bound pods; ``nodes`` map a node name to
``NodeCost(labels, gpus)``; ``prices`` is the coordinator's ``scheduling.prices``
(:class:`~coordinator.core.framework.prices.PriceTable`). A pod pays its share of its node: the
node's price (spot price on a spot node) times its GPUs over the node's GPUs, or the whole node's
price when either counts no GPUs;
a node never costs more than its price. Pods on nodes the table does not price are listed in
``unpriced`` and cost nothing in the total (the report says so).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from coordinator.core.framework.prices import PriceTable
from coordinator.neuronetes.decide.policy.errors import PolicyError

__all__ = ["CostReport", "NodeCost", "PodCost", "pool_cost"]


@dataclass(frozen=True, slots=True)
class PodCost:
    name: str
    node: str
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class NodeCost:
    labels: Mapping[str, str] = field(default_factory=dict)
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class CostReport:
    per_hour: float
    by_node: Mapping[str, float]
    unpriced: tuple[str, ...] = ()  # pods whose node has no price
    max_per_hour: float | None = None

    @property
    def exceeded(self) -> bool:
        return self.max_per_hour is not None and self.per_hour > self.max_per_hour

    @property
    def reason(self) -> str:
        text = f"pool costs ${self.per_hour:.2f}/h"
        if self.max_per_hour is not None:
            verb = "above" if self.exceeded else "within"
            text += f", {verb} maxCostPerHour ${self.max_per_hour:.2f}"
        if self.unpriced:
            text += f" ({len(self.unpriced)} pod(s) on nodes with no price: not counted)"
        return text


def pool_cost(
    pods: Iterable[PodCost],
    nodes: Mapping[str, NodeCost],
    prices: PriceTable,
    max_cost_per_hour: float | None = None,
) -> CostReport:
    if max_cost_per_hour is not None and max_cost_per_hour < 0:
        raise PolicyError(f"maxCostPerHour: cannot be negative ({max_cost_per_hour})")
    by_node: dict[str, float] = {}
    unpriced: list[str] = []
    for pod in pods:
        if pod.gpus < 0:
            raise PolicyError(f"pod {pod.name}: a negative GPU count ({pod.gpus})")
        node = nodes.get(pod.node)
        price = None if node is None else prices.node_price(node.labels, node.gpus)
        if node is None or price is None:
            unpriced.append(pod.name)
            continue
        share = pod.gpus / node.gpus if pod.gpus > 0 and node.gpus > 0 else 1.0
        # a node is never charged more than its price, however many of the pool's pods it runs
        by_node[pod.node] = min(price, by_node.get(pod.node, 0.0) + price * min(1.0, share))
    return CostReport(
        per_hour=round(sum(by_node.values()), 6),
        by_node=by_node,
        unpriced=tuple(unpriced),
        max_per_hour=max_cost_per_hour,
    )
