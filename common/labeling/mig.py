"""``topos.io/mig.capable``, ``mig.enabled`` and the MIG layout annotation."""

from __future__ import annotations

from common import labels as L
from common.labeling import facts
from common.labels import LabelBuilder, NodeLabels
from common.model import NodeTopology


def mig(topology: NodeTopology) -> NodeLabels:
    b = LabelBuilder()
    b.flag(L.MIG_CAPABLE, facts.mig_capable(topology))
    b.flag(L.MIG_ENABLED, facts.mig_enabled(topology))
    layout = facts.mig_layout(topology)
    if layout is not None:
        b.annotation(L.MIG_LAYOUT, layout)
    return b.build()
