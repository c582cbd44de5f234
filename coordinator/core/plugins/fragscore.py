"""``GpuFragmentation``: score nodes by how little a pod's placement fragments their free GPUs.

For a pod sharing a GPU (docs/sharing.md) each feasible node is scored by the growth of its
expected fragmentation (:mod:`.fragmentation`, FGD's measure against the pod shapes the cluster
sees) once the pod holds its share of the GPU :mod:`.sharedchoice` picked there, plus a
penalty for each GPU the node's largest free NVLink group loses (a share never needs NVLink;
multi-GPU pods do). Smaller growth scores higher: no growth is 50, each 0.02 GPU of growth a
point less (a shrinking fragmentation scores above 50), within 0–100. A fixed scale rather than
one stretched over the feasible nodes: small differences stay small beside the other scores, and
the score is remembered per node state like any node-local one.

Whole-GPU and CPU-only pods (whose CPUs and memory can strand a node's GPUs) are scored the
same way while pods sharing a GPU are seen (``fragmentation.allPods: auto``, the default; ``true``
always, ``false`` never); on a cluster without shares ``GpuPacking``, ``GpuTopology`` and
``GpuAvailability`` place them as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from coordinator.core.framework.config_errors import ConfigError
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import PLACEMENTS, Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.plugins.fragmentation import ShapeMix, felt, growth, node_room
from coordinator.core.plugins.gpuchoice import topology_index
from coordinator.core.plugins.sharedchoice import nvlink_loss
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = ["GpuFragmentation", "GpuFragmentationArgs"]

#: Thousandths of a GPU of fragmentation one GPU lost from an intact NVLink group counts as.
NVLINK_LOSS: Final = 250
#: Thousandths of a GPU of growth per point of score: no growth scores 50, a GPU's worth 0.
_PER_POINT: Final = 20
_SCORES: dict[tuple[object, ...], float] = {}
_WHOLE: dict[tuple[object, ...], float] = {}  # points of pods taking whole GPUs or none
_SCORES_LIMIT: Final = 200_000


@dataclass(frozen=True, slots=True)
class GpuFragmentationArgs:
    #: ``fragmentation.allPods``: score whole-GPU and CPU-only pods too; ``None`` (``auto``):
    #: while pods sharing a GPU are seen (docs/sharing.md).
    all_pods: bool | None = None

    def __post_init__(self) -> None:
        given: object = self.all_pods
        if given == "auto":  # as users write it
            object.__setattr__(self, "all_pods", None)
        elif self.all_pods is not None and not isinstance(self.all_pods, bool):
            raise ConfigError("allPods: must be true, false or auto")


class GpuFragmentation(Plugin):
    name = "GpuFragmentation"
    #: Raw scores are remembered per node state, pod class and shape mix (the framework's
    #: memo, :meth:`memo_epoch`): a remembered score is the one computed now.
    node_local = True
    alike_nodes = True  # reads only what NodeInfo.state_key stands for

    def __init__(self, mix: ShapeMix, args: GpuFragmentationArgs | None = None) -> None:
        self.mix = mix
        self.all_pods = (args or GpuFragmentationArgs()).all_pods

    def memo_epoch(self, pod: PodRequest) -> object:
        """The shape mix scores are read against: each is remembered per mix."""
        return self.mix.current().version

    def _scores(self, pod: PodRequest) -> bool:
        if pod.share is not None:
            return True
        every = self.mix.sharing if self.all_pods is None else self.all_pods
        return bool(every) and not pod.mig

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        return SUCCESS if self._scores(pod) else SKIP

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        if node.topology is None:
            return 0.0
        mix = self.mix.current()
        requests = pod.requests
        cores = -(-requests.get("cpu", 0) // 1000)
        gib = -(-requests.get("memory", 0) // 2**30)
        if pod.share is None:
            # Whole GPUs or none: the points follow the node's room (its CPU and memory as far
            # as growth tells them apart) and the pod's whole cores and GiB alone; alike nodes
            # share them (a key of ints, see growth's memo). No free GPU: nothing to fragment.
            room = node_room(node)
            if not room.free:
                return _NO_GROWTH
            flat = (
                mix.version,
                room.free,
                room.whole,
                *felt(room, mix, cores, gib),
                cores,
                gib,
                pod.gpus,
            )
            points = _WHOLE.get(flat)
            if points is None:
                if len(_WHOLE) >= _SCORES_LIMIT:
                    _WHOLE.clear()
                points = _WHOLE[flat] = _points(growth(node, mix, cores, whole=pod.gpus, gib=gib))
            return points
        placement = state.read(PLACEMENTS).get(node.name)
        if placement is None or placement.share is None or not placement.gpus:
            return _points(growth(node, mix, cores, whole=pod.gpus, gib=gib))
        gpu = placement.gpus[0]
        # Nodes alike (hardware shape, device state, free CPU and memory) score alike.
        held = placement.share
        key = (  # ints only (the device token is an untracked object): see growth's memo
            topology_index(node.topology).ident,
            node.device_token,
            node.free("cpu") // 1000,
            node.free("memory") // 2**30,
            mix.version,
            cores,
            gib,
            gpu,
            held.milli,
            held.memory_mib,
        )
        hit = _SCORES.get(key)
        if hit is not None:
            return hit
        up = growth(node, mix, cores, share=(gpu, held), gib=gib)
        up += NVLINK_LOSS * nvlink_loss(node, gpu)
        if len(_SCORES) >= _SCORES_LIMIT:
            _SCORES.clear()
        result = _SCORES[key] = _points(up)
        return result


def _points(up: int) -> float:
    """No growth 50, one point less per ``_PER_POINT`` of growth, within 0–100."""
    return min(100.0, max(0.0, 50.0 - up / _PER_POINT))


_NO_GROWTH: Final = _points(0)


PLUGIN: Final = PluginSpec(
    plugin=GpuFragmentation,
    args=GpuFragmentationArgs,
    factory=lambda args, c: GpuFragmentation(c.mix(), args),
    weight=25,
    weight_key="gpu_fragmentation",
)
