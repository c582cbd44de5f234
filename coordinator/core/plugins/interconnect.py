"""``InterconnectHealth``: a node whose GPUs' links are degraded scores lower (docs/health.md).

- A multi-GPU pod: the GPUs it would get on the node whose PCIe link trained narrower than its
  maximum (``pcie_width_current`` < ``pcie_width_max``, from the agent) lower the score by the
  lost share of width — x8 of x16 on one of its GPUs: 50. Host↔GPU copies and GPUDirect traffic
  of a multi-GPU job cross those links; a single-GPU pod is not scored (a downtrained link is
  still worth using rather than leaving idle).
- A member of a gang (pods spanning nodes): a node whose multi-node NVLink fabric reports degraded
  bandwidth or an unhealthy route halves the score.

Degraded NVLink pairs are not scored here: the GPU choice counts them as their fallback link
class (``common/linkhealth.py``), which ``GpuTopology`` scores. Unhealthy GPUs are never offered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from common.linkhealth import fabric_degraded
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import PLACEMENTS, Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = ["PLUGIN", "InterconnectHealth"]


def _in_gang(pod: PodRequest) -> bool:
    return pod.gang is not None and pod.gang.source != "pod"


class InterconnectHealth(Plugin):
    name = "InterconnectHealth"
    node_local = True
    alike_nodes = True  # reads the topology and the placement: what NodeInfo.state_key stands for

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        return SUCCESS if pod.gpus > 1 or (_in_gang(pod) and pod.wants_devices) else SKIP

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        topology = node.topology
        if topology is None:
            return 100.0
        score = 100.0
        if pod.gpus > 1:
            placement = state.read(PLACEMENTS).get(node.name)
            for i in () if placement is None else placement.gpus:
                g = topology.gpus[i]
                cur, top = g.pcie_width_current, g.pcie_width_max
                if cur is not None and top is not None and 0 < cur < top:
                    score = min(score, 100.0 * cur / top)
        if _in_gang(pod) and fabric_degraded(topology) is not None:
            score /= 2
        return score


PLUGIN: Final = PluginSpec[None](plugin=InterconnectHealth, weight=3)
