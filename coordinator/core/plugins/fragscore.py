"""``GpuFragmentation``: score nodes by how little a pod's placement fragments their free GPUs.

For a pod sharing a GPU (docs/sharing.md) each feasible node is scored by the growth of its
expected fragmentation (:mod:`.fragmentation`, FGD's measure against the pod shapes the cluster
sees) once the pod holds its share of the GPU :mod:`.sharedchoice` picked there, plus a
penalty for each GPU the node's largest free NVLink group loses (a share never needs NVLink;
multi-GPU pods do). Smaller growth scores higher: raw scores are normalised to 0–100 over the
feasible nodes. Whole-GPU and CPU-only pods (whose CPUs can strand a node's GPUs) are scored the
same way only with ``fragmentation.allPods`` (see docs/sharing.md for why it is off by default);
otherwise ``GpuPacking``, ``GpuTopology`` and ``GpuAvailability`` place them as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import PLACEMENTS
from coordinator.core.plugins.fragmentation import ShapeMix, growth
from coordinator.core.plugins.sharedchoice import nvlink_loss
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = ["GpuFragmentation"]

#: Thousandths of a GPU of fragmentation one GPU lost from an intact NVLink group counts as.
NVLINK_LOSS: Final = 250


class GpuFragmentation:
    name = "GpuFragmentation"

    def __init__(self, config: SchedulerConfig, mix: ShapeMix) -> None:
        self.mix = mix
        self.all_pods = config.fragmentation_all_pods

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        if pod.share is not None or (self.all_pods and not pod.mig):
            return SUCCESS
        return SKIP

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        if node.topology is None:
            return 0.0
        placement = state.read(PLACEMENTS).get(node.name)
        mix = self.mix.current()
        cores = -(-pod.requests.get("cpu", 0) // 1000)
        if placement is not None and placement.share is not None and placement.gpus:
            gpu = placement.gpus[0]
            up = growth(node, mix, cores, share=(gpu, placement.share))
            up += NVLINK_LOSS * nvlink_loss(node, gpu)
        else:
            up = growth(node, mix, cores, whole=pod.gpus)
        return float(-up)

    def normalize_scores(
        self, state: CycleState, pod: PodRequest, scores: dict[str, float]
    ) -> None:
        if not scores:
            return
        low, high = min(scores.values()), max(scores.values())
        for name, raw in scores.items():
            scores[name] = 100.0 if high == low else 100.0 * (raw - low) / (high - low)
