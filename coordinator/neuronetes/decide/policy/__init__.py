"""Pure policies the AgentPool controller calls (issue 18; docs/neuronetes-policies.md).

No Kubernetes client, no event loop except :mod:`.carbon_source` (which fetches intensities);
every function takes plain values and returns a value with a ``reason`` to put in the pool's
status and Events. Bad input raises :class:`PolicyError` (a ``ValueError``) naming the field.

- :mod:`.decision`   ``decide(CostInputs) -> CostDecision``: the guide's cost/SLO decision tree.
- :mod:`.budget`     ``pool_cost(pods, nodes, prices, max_cost_per_hour) -> CostReport``.
- :mod:`.spot`       ``SpotSettings.from_pool(spec)``, ``InterruptionTracker``,
                     ``lost_spot_nodes(...)``, ``spot_replicas_allowed(...)``,
                     ``may_place_on_spot(...)``, ``replacement_affinity(...)``,
                     ``ON_DEMAND_AFFINITY``.
- :mod:`.carbon`     ``parse_intensity(text)``, ``Intensities`` (last good value and its age),
                     ``CleanHours.parse("09:00-17:00")`` / ``.gate(now, urgent)``,
                     ``check_regions(preferred, known)``.
- :mod:`.carbon_source` ``IntensitySource(url or path).refresh()`` (HTTP or file, with timeout).
"""

from coordinator.neuronetes.decide.policy.errors import PolicyError

__all__ = ["PolicyError"]
