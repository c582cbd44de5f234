"""The policies the controller runs on every pool by default, in order: spot first (it finds
vanished nodes and how many replicas are on spot), then the cost/SLO decision tree, carbon
(readings, clean-energy hours) and the model cache. Each does nothing for a pool whose spec
lacks its block (docs/neuronetes.md, "The guide's scheduling blocks")."""

from __future__ import annotations

from typing import Final

from coordinator.neuronetes.decide.carbon_policy import cache_policy, carbon_policy
from coordinator.neuronetes.decide.cost_policy import cost_policy, spot_policy
from coordinator.neuronetes.decide.hooks import Policy

__all__ = ["GUIDE_POLICIES"]

GUIDE_POLICIES: Final[tuple[Policy, ...]] = (spot_policy, cost_policy, carbon_policy, cache_policy)
