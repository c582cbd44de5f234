"""Which GPU of one node a fractional pod shares (docs/sharing.md).

Among the GPUs open to sharing (healthy, not MIG-enabled, held by no whole-GPU pod or DRA claim)
with room for the share — compute and memory both — pick, in order:

1. the one whose use raises the node's fragmentation least, against the pod shapes the cluster
   sees (:mod:`.fragmentation`);
2. a GPU already shared before a wholly free one;
3. of the wholly free ones only the GPU a one-GPU pod would get (:meth:`TopologyIndex.choose`:
   the one that leaves the largest intact NVLink groups); of the shared ones the tightest fit;
4. the lowest index.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from coordinator.core.plugins.fragmentation import Mix, growth
from coordinator.core.plugins.gpuchoice import topology_index
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.sharing import WHOLE, GpuShare, HeldShare, mib_text
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.status import Reason, Status

__all__ = ["choose_share", "nvlink_loss"]


def nvlink_loss(node: NodeInfo, gpu: int) -> int:
    """How many GPUs the node's largest free NVLink group loses when ``gpu`` stops being free
    (0 for a GPU already shared, or one in no group)."""
    if node.topology is None or gpu not in node.free_gpus:
        return 0
    mask = 0
    for i in node.free_gpus:
        mask |= 1 << i
    index = topology_index(node.topology)
    before = index.clique(1, mask)
    if before < 2:
        return 0
    return before - max(1, index.clique(1, mask & ~(1 << gpu)))


def _room_text(node: NodeInfo, gpu: int) -> str:
    milli, mib = node.share_room[gpu]
    memory = "" if mib is None else f", {mib_text(mib)}"
    return f"{milli / WHOLE:g} of GPU {gpu}{memory}"


_NO_ROOM: dict[tuple[object, ...], Status] = {}
_NO_ROOM_LIMIT: Final = 50_000


def _no_room(node: NodeInfo, share: GpuShare) -> Status:
    """Why no GPU of ``node`` takes ``share``, naming each GPU's room (alike nodes: one text)."""
    topo = node.topology
    assert topo is not None
    key = (
        topology_index(topo).ident,
        node.device_token,
        share.milli,
        share.memory_mib,
        share.memory_milli,
    )
    hit = _NO_ROOM.get(key)
    if hit is None:
        wanted = share.on_gpu(max((g.memory_total_mib or 0) for g in topo.gpus) or None)
        want = wanted.text() if wanted is not None else "a share by memory of GPUs of known memory"
        rooms = "; ".join(_room_text(node, i) for i in node.share_room) or "no GPU free or shared"
        if len(_NO_ROOM) >= _NO_ROOM_LIMIT:
            _NO_ROOM.clear()
        hit = Status.unschedulable(Reason.SHARE_NO_ROOM, detail=f"wants {want}; room: {rooms}")
        _NO_ROOM[key] = hit
    return hit


def choose_share(
    node: NodeInfo, pod: PodRequest, candidates: Iterable[int], mix: Mix
) -> tuple[int, HeldShare, bool] | Status:
    """The GPU and what the pod holds of it, and whether it was ranked among several GPUs that
    fit (by growth, which reads the CPU and memory the node has left); or why no GPU of
    ``candidates`` will do."""
    topo = node.topology
    share = pod.share
    assert topo is not None
    assert share is not None
    cores = -(-pod.requests.get("cpu", 0) // 1000)
    gib = -(-pod.requests.get("memory", 0) // 2**30)
    fresh_left = len(node.free_gpus) - node.unattributed_gpus
    fresh_mask = 0
    fits: list[tuple[int, HeldShare]] = []
    looked = False
    for i in candidates:
        looked = True
        held = share.on_gpu(topo.gpus[i].memory_total_mib)
        milli, mib = node.share_room[i]
        if held is None or held.milli > milli or (mib is not None and held.memory_mib > mib):
            continue
        if i in node.shared:
            fits.append((i, held))
        elif fresh_left > 0:
            fresh_mask |= 1 << i
            fits.append((i, held))
    if fresh_mask:
        # Wholly free GPUs are alike to fragmentation: keep only the one a 1-GPU pod would take.
        best = topology_index(topo).choose(fresh_mask, 1, "any")
        keep = best.gpus[0] if best is not None else None
        fits = [(i, h) for i, h in fits if i in node.shared or i == keep]
    if not fits:
        if not looked and all(g.mig_enabled for g in topo.gpus if g.healthy):
            return Status.unschedulable(Reason.SHARE_MIG)
        return _no_room(node, share)

    def rank(item: tuple[int, HeldShare]) -> tuple[int, int, int, int]:
        i, held = item
        up = growth(node, mix, cores, share=(i, held), gib=gib)
        return (up, 0 if i in node.shared else 1, node.share_room[i][0] - held.milli, i)

    if len(fits) == 1:
        return (*fits[0], False)
    return (*min(fits, key=rank), True)
