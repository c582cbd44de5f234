"""``topos.io/gpu.healthy`` (count) and, when some GPU is not, why (``topos.io/gpu.health``)."""

from __future__ import annotations

from common import labels as L
from common.labeling import facts
from common.labels import LabelBuilder, NodeLabels
from common.model import NodeTopology


def health(topology: NodeTopology) -> NodeLabels:
    b = LabelBuilder()
    b.number(L.GPU_HEALTHY, facts.healthy_count(topology))
    sick = facts.unhealthy(topology)
    if sick:
        b.annotation(
            L.GPU_HEALTH,
            "\n".join(
                f"GPU{gpu.index} {gpu.uuid}: {gpu.health_reason or 'unhealthy'}" for gpu in sick
            ),
        )
    return b.build()
