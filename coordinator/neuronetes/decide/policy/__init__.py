"""The per-pool policies the AgentPool controller runs (issue 18; docs/neuronetes-policies.md):
one module per block of the guide's ``spec.scheduling``, each holding its pure rules and its
policy (a :data:`~coordinator.neuronetes.decide.hooks.Policy`). No I/O here: what a policy needs
from outside (prices, carbon intensities, node facts) comes in its context. Bad input raises
:class:`PolicyError` (a ``ValueError``) naming the field.

- :mod:`.spot`      ``costOptimization`` spot capacity: ``spot_policy``; ``SpotSettings``,
                    ``InterruptionTracker``, ``lost_spot_nodes``, ``spot_replicas_allowed``,
                    ``on_demand(template)``.
- :mod:`.cost`      ``costOptimization`` cost/SLO: ``cost_policy``;
                    ``pool_cost(pods, nodes, prices, max_cost_per_hour) -> CostReport``.
- :mod:`.decision`  ``decide(CostInputs) -> CostDecision``: the guide's cost/SLO decision tree
                    (the cost policy's rules; ``Action``).
- :mod:`.hosting`   ``can_host(...)``: whether a node could take one more of the pool's pods.
- :mod:`.carbon`    ``carbonAware``: ``carbon_policy``; ``parse_intensity``, ``Intensities``,
                    ``CleanHours``, ``check_regions``.
- :mod:`.cache`     ``cacheAware``: ``cache_policy``, ``selects`` (the model rule:
                    ``core.podspec.poolkeys.holds_model``).

:data:`GUIDE_POLICIES` is what the controller runs on every pool by default, in order: spot
first (it finds vanished nodes and how many replicas are on spot), then the cost/SLO decision
tree, carbon (readings, clean-energy hours) and the model cache. Each does nothing for a pool
whose spec lacks its block (docs/neuronetes.md, "The guide's scheduling blocks").
"""

from __future__ import annotations

from typing import Final

from coordinator.neuronetes.decide.hooks import Policy
from coordinator.neuronetes.decide.policy.cache import cache_policy
from coordinator.neuronetes.decide.policy.carbon import carbon_policy
from coordinator.neuronetes.decide.policy.cost import cost_policy
from coordinator.neuronetes.decide.policy.errors import PolicyError
from coordinator.neuronetes.decide.policy.spot import spot_policy

__all__ = ["GUIDE_POLICIES", "PolicyError"]

GUIDE_POLICIES: Final[tuple[Policy, ...]] = (spot_policy, cost_policy, carbon_policy, cache_policy)
