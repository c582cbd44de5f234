"""``distributed`` and ``consolidated`` for a group's pods that are placed one at a time.

A pod group placed at once spreads or packs by the gang planner (``core/domains``). But a
Deployment's replicas come one by one — a rolling update's surge pod, a scale-up, a replaced
replica — and so do members beyond a running gang's minimum: each goes through the per-pod cycle.
``GroupSpread`` keeps the group's strategy true for them, as a soft affinity among the group's
pods (namespace and group name): under ``distributed`` a node holding fewer of them scores higher,
under ``consolidated`` one holding more (such a pod is not spread by the default topology
spreading either: :mod:`.podtopologyspread`). Pods with neither strategy or without a group are
not scored (SKIP).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from common import podkeys
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = ["GroupSpread", "group_of"]

_GROUP_LABELS: Final = (*podkeys.GANG.names, *podkeys.POD_GROUP_X_K8S.names)
_SCORED: Final = ("distributed", "consolidated")


def group_of(labels: Mapping[str, str]) -> str | None:
    """The pod group a pod's labels name (Topos, KubeNexus or x-k8s spelling), if any."""
    return next((labels[k] for k in _GROUP_LABELS if k in labels), None)


class GroupSpread(Plugin):
    name = "GroupSpread"

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        scored = pod.placement in _SCORED and pod.gang is not None
        return SUCCESS if scored else SKIP

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        assert pod.gang is not None  # pre_score skipped the others
        group = pod.gang.name
        siblings = sum(
            1
            for p in node.pods
            if p.namespace == pod.namespace and p.key != pod.key and group_of(p.labels) == group
        )
        if pod.placement == "consolidated":
            return 100.0 * siblings / (1 + siblings)
        return 100.0 / (1 + siblings)


PLUGIN: Final = PluginSpec[None](
    plugin=GroupSpread, weight=2, pool_weight=2, weight_key="inter_pod_affinity"
)
