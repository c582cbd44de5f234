"""GPU, MIG and NUMA placement plugins.

``GpuTopology`` filters nodes by what the pod needs inside them (GPU count on the real free
GPUs, per-GPU memory, MIG instances, locality, NUMA policy — see ``placement.py``), records the
chosen GPUs/MIG instances/NUMA nodes per feasible node, and scores the link class of the chosen
GPUs. ``NumaTopology`` scores NUMA alignment, ``GpuPacking`` bin-packs (or spreads) GPU pods
across nodes, and ``GpuAvailability`` keeps CPU-only pods off nodes with free GPUs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Final

from common import labels
from common.podkeys import GPU_RESOURCE
from coordinator.core.framework.config_errors import ConfigError
from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.framework.interfaces import DRA_SERVED, PLACEMENTS, Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.plugins.fragmentation import ShapeMix
from coordinator.core.plugins.gpuchoice import topology_index
from coordinator.core.plugins.packingmode import PackingArgs
from coordinator.core.plugins.placement import device_key, plan_placement
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.sharing import WHOLE, gib_text
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Reason, Status

__all__ = [
    "GpuAvailability",
    "GpuPacking",
    "GpuTopology",
    "GpuTopologyArgs",
    "NumaTopology",
    "hands_out_replicas",
    "link_score",
]

_DEVICE_KEY: Final = StateKey[tuple[object, ...]]("GpuTopology.device_key")

# Score of the worst link among the chosen GPUs (a single GPU counts as NVLink-perfect).
_LINK_SCORE: Final = {
    "X": 100.0,
    "NV": 100.0,
    "PIX": 80.0,
    "PXB": 70.0,
    "PHB": 55.0,
    "NODE": 40.0,
    "SYS": 20.0,
}


def link_score(node: NodeInfo, gpus: tuple[int, ...]) -> float:
    """Score of the worst link among ``gpus`` (0 for fewer than two, or no topology known)."""
    if node.topology is None or len(gpus) < 2:
        return 0.0  # no topology known: nothing to promise
    return _LINK_SCORE[topology_index(node.topology).worst(gpus).kind]


def _dra_serves_gpus(state: CycleState, pod: PodRequest, node: NodeInfo) -> bool:
    """KEP-5004: the node lists no nvidia.com/gpu and a DeviceClass serves it (DynamicResources
    chooses the GPUs)."""
    served = state.get(DRA_SERVED)
    return served is not None and GPU_RESOURCE in served and not node.allocatable.get(GPU_RESOURCE)


def hands_out_replicas(node: NodeInfo) -> bool:
    """Whether the node's device plugin advertises replicas of its GPUs as ``nvidia.com/gpu``
    (NVIDIA time-slicing or MPS, HAMi): GFD's labels say so, or it lists more ``nvidia.com/gpu``
    than it has GPUs (and no MIG, whose "single" strategy lists instances so)."""
    strategy = node.labels.get(labels.GFD_SHARING_STRATEGY, "")
    replicas = node.labels.get(labels.GFD_REPLICAS, "")
    if strategy in ("time-slicing", "mps") or (replicas.isdigit() and int(replicas) > 1):
        return True
    gpus = node.topology.gpus if node.topology is not None else ()
    if not gpus or any(g.mig_enabled for g in gpus):
        return False
    return node.allocatable.get(GPU_RESOURCE, 0) > len(gpus)


def _largest_gpu_mib(snapshot: Snapshot) -> int:
    seen: set[int] = set()
    largest = 0
    for node in snapshot.nodes:
        topo = node.topology
        if topo is None or id(topo.gpus) in seen:
            continue
        seen.add(id(topo.gpus))
        for g in topo.gpus:
            if not g.mig_enabled and g.memory_total_mib:
                largest = max(largest, g.memory_total_mib)
    return largest


@dataclass(frozen=True, slots=True)
class GpuTopologyArgs:
    #: ``fragmentation.shapeHalfLife``: pods after which a pod shape GpuTopology records (into
    #: the shape mix a share's GPU is chosen against, GpuFragmentation's too) weighs half.
    shape_half_life: int = 2000

    def __post_init__(self) -> None:
        half = self.shape_half_life
        if isinstance(half, bool) or not isinstance(half, int) or half < 1:
            raise ConfigError("shapeHalfLife: must be a whole number of pods, ≥ 1")


class GpuTopology(Plugin):
    name = "GpuTopology"
    node_local = True
    alike_nodes = True  # reads only what NodeInfo.state_key stands for
    #: Pods added to a node only take GPUs, MIG instances, room on shared GPUs and NUMA
    #: capacity; whether some GPU has room never depends on the shape mix.
    lasting_refusals = True

    def __init__(self, mix: ShapeMix | None = None) -> None:
        #: the pod shapes seen, which a share's GPU is chosen against (and recorded into)
        self.mix = mix or ShapeMix()

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        if pod.wants_devices:
            self.mix.record(pod)
        if pod.share is not None and pod.share.memory_mib is not None:
            largest = _largest_gpu_mib(snapshot)
            if largest and pod.share.memory_mib > largest:
                return Status.unresolvable(
                    Reason.SHARE_MEMORY,
                    detail=f"{pod.share.memory_path}: no GPU has "
                    f"{gib_text(pod.share.memory_mib)}; largest is {gib_text(largest)}",
                )
        if pod.wants_devices or pod.numa_policy is not None:
            state.write(_DEVICE_KEY, device_key(pod))
            return SUCCESS
        return SKIP

    def observe_running(self, pods: Sequence[PodInfo]) -> None:
        self.mix.record_running(pods)

    def paused(self) -> AbstractContextManager[None]:
        """What-if cycles: the pods they see are not counted into the shape mix."""
        return self.mix.paused()

    def memo_epoch(self, pod: PodRequest) -> object:
        """A share's GPU is chosen against the shape mix of the moment (whether one has room
        is not): chosen again for a newer mix."""
        return self.mix.current().version if pod.share is not None else None

    def filter_key(self, node: NodeInfo) -> object:
        """What :meth:`filter` reads of a node: its shape (labels, allocatable, hardware) and
        device state; nodes alike in both share refusals (:mod:`~.framework.memo`). A share's
        GPU choice also reads the CPU left, but whether it is refused does not."""
        if node.shape_key is None:
            return None
        return (node.shape_key, node.device_token)

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        if _dra_serves_gpus(state, pod, node):
            return SUCCESS
        if pod.share is not None and pod.share.replica and not hands_out_replicas(node):
            # The kubelet would give its one nvidia.com/gpu a whole GPU of its own choosing.
            return Status.unresolvable(
                Reason.SHARE_NO_REPLICAS,
                detail=f"a share asking for 1 {GPU_RESOURCE} needs time-slicing or MPS "
                f"replicas; leave {GPU_RESOURCE} out to share by annotation (docs/sharing.md)",
            )
        plan = plan_placement(node, pod, state.get(_DEVICE_KEY), mix=self.mix.current())
        if isinstance(plan, Status):
            return plan
        state.read(PLACEMENTS)[node.name] = plan.placement
        return SUCCESS

    def candidates(
        self, state: CycleState, pod: PodRequest, snapshot: Snapshot
    ) -> Collection[str] | None:
        """Nodes with enough free whole GPUs, the MIG profiles asked for, or room for the share
        (an index lookup)."""
        index = snapshot.capacity()
        if pod.share is not None:
            share = pod.share
            need = share.milli if share.milli is not None else share.memory_milli
            return index.with_share_room(max(1, min(need or 1, WHOLE)))
        gpus = index.with_free_gpus(pod.gpus) if pod.gpus > 0 else None
        mig = index.with_free_mig(p for p, _ in pod.mig) if pod.mig else None
        if gpus is None or mig is None:
            return gpus if mig is None else mig
        return gpus & mig

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        return SUCCESS if pod.gpus > 1 else SKIP

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        placement = state.read(PLACEMENTS).get(node.name)
        return 0.0 if placement is None else link_score(node, placement.gpus)


class NumaTopology(Plugin):
    name = "NumaTopology"
    node_local = True
    alike_nodes = True  # reads only what NodeInfo.state_key stands for

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        return SUCCESS if pod.numa_policy is not None else SKIP

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        placement = state.read(PLACEMENTS).get(node.name)
        if placement is None or not placement.numa_usage:
            return 0.0  # not pinned: best-effort could not align here
        return 100.0 / len(placement.numa_usage)


def _gpu_totals(node: NodeInfo) -> tuple[int, int]:
    """(device slots on the node, slots in use) counting whole GPUs and MIG instances."""
    total = node.gpu_slots
    return total, min(total, node.gpu_slots_used)


class GpuPacking(Plugin):
    name = "GpuPacking"
    node_local = True
    alike_nodes = True  # reads only what NodeInfo.state_key stands for

    def __init__(self, args: PackingArgs | None = None) -> None:
        self.spread = (args or PackingArgs()).spread

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        return SUCCESS if pod.wants_devices else SKIP

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        total, used = _gpu_totals(node)
        if total == 0:
            return 0.0
        opened = 0
        if pod.share is not None:  # a share opens a GPU only when it is not shared yet
            placement = state.read(PLACEMENTS).get(node.name)
            opened = int(placement is not None and bool(set(placement.gpus) - set(node.shared)))
        after = min(total, used + pod.gpus + pod.mig_count + opened)
        share = 100.0 * after / total
        return 100.0 - share if self.spread else share


class GpuAvailability(Plugin):
    name = "GpuAvailability"
    node_local = True
    alike_nodes = True  # reads only what NodeInfo.state_key stands for

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        return SKIP if pod.wants_devices or pod.claims else SUCCESS

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        total, used = _gpu_totals(node)
        if total == 0:
            return 100.0
        return 100.0 * used / total


GPU_TOPOLOGY: Final = PluginSpec(
    plugin=GpuTopology,
    args=GpuTopologyArgs,
    factory=lambda args, c: GpuTopology(c.mix(args.shape_half_life)),
    weight=5,
    pool_weight=5,
    weight_key="topology_fitness",
)


NUMA_TOPOLOGY: Final = PluginSpec[None](
    plugin=NumaTopology, weight=3, pool_weight=5, weight_key="numa_fit", aliases=("NUMATopology",)
)


GPU_PACKING: Final = PluginSpec(
    plugin=GpuPacking,
    args=PackingArgs,
    factory=lambda args, _: GpuPacking(args),
    weight=3,
    pool_weight=6,
    weight_key="bin_packing",
)


GPU_AVAILABILITY: Final = PluginSpec[None](
    plugin=GpuAvailability, weight=2, pool_weight=6, weight_key="gpu_availability"
)
