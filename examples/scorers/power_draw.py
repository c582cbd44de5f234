"""An example custom scorer for Topos (docs/neuronetes-policies.md#custom-scorers): prefer nodes
that draw less power per GPU — the guide's "power consumption" part of cost efficiency.

Configure it in the coordinator's ``scheduling`` section, with this file importable by the
coordinator (installed in its image, or on ``PYTHONPATH``)::

    customScorers:
      - name: PowerDraw
        module: power_draw:PowerDraw
        weight: 5
    profiles:
      - pluginConfig:
          - name: PowerDraw
            args: {label: example.com/watts-per-gpu, maxWatts: 1000}

A plugin is any object with ``name`` and ``score(state, pod, node) -> float`` (0–100); ``pod`` is
a ``coordinator.core.podspec.parse.PodRequest``, ``node`` a
``coordinator.core.snapshot.nodeinfo.NodeInfo`` (``labels``, ``allocatable``, ``topology``,
``cached_models``...). It may also have ``pre_score(state, pod, nodes, snapshot)`` and
``normalize_scores(state, pod, scores)``. It imports nothing from Topos to be one.
"""

from __future__ import annotations

from typing import Any


class PowerDraw:
    name = "PowerDraw"

    def __init__(self, label: str = "example.com/watts-per-gpu", maxWatts: float = 1000) -> None:
        self.label = label
        self.max_watts = float(maxWatts)

    def score(self, state: Any, pod: Any, node: Any) -> float:
        """100 for a node drawing nothing, 0 at ``maxWatts`` or above, 0 when not labelled."""
        text = node.labels.get(self.label)
        try:
            watts = float(text)
        except (TypeError, ValueError):
            return 0.0
        return max(0.0, 100.0 * (1.0 - watts / self.max_watts))
