"""How fragmented a node's free GPU capacity is, against the pod shapes the cluster sees.

In the spirit of FGD (Weng et al., "Beware of Fragmentation", USENIX ATC'23): a node's free GPU
capacity is *fragmented for* a pod shape when that shape could not use it there —

- the node lacks the CPU the shape asks for: all its free GPU capacity;
- a shape of ``k`` whole GPUs: every partly used GPU, or all free capacity when fewer than ``k``
  GPUs are wholly free;
- a share ``d`` of one GPU: every GPU with less than ``d`` free.

The node's fragmentation is the expectation over the :class:`ShapeMix` (a decayed histogram of the
shapes of recent pods, each counted once, with a default mix until pods are seen). Placing a pod
raises it by some amount; :func:`growth` is that amount, and the best place makes it smallest.
Capacity is counted in thousandths of a GPU; a GPU's free part is the smaller of its free compute
and its free memory (as thousandths of its memory).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate, count
from typing import Final

from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.sharing import WHOLE, HeldShare
from coordinator.core.snapshot.nodeinfo import NodeInfo

__all__ = [
    "DEFAULT_MIX",
    "Mix",
    "NodeRoom",
    "Shape",
    "ShapeMix",
    "fragmentation",
    "growth",
    "node_room",
    "shape_of",
]

#: (CPU cores asked, whole GPUs, thousandths of one GPU): one of the two GPU parts is 0.
Shape = tuple[int, int, int]

#: Before any pod is seen: the shape of the ATC'23 trace (cluster-trace-gpu-v2023): 38 % shares
#: of one GPU, 48 % one GPU, 1 % 2–8 GPUs (CPU-only pods do not weigh on GPUs).
DEFAULT_MIX: Final[Mapping[Shape, float]] = {
    (4, 0, 250): 0.10,
    (4, 0, 500): 0.18,
    (4, 0, 750): 0.10,
    (8, 1, 0): 0.59,
    (16, 2, 0): 0.01,
    (32, 4, 0): 0.01,
    (64, 8, 0): 0.01,
}
_MAX_SHAPES: Final = 48
_REFRESH: Final = 32  # records between refreshes of the mix scoring uses
_SEEN_LIMIT: Final = 200_000


#: Mix versions, unique in the process: memos keyed by a version never mix two distributions.
_VERSIONS = count()


@dataclass(frozen=True, slots=True)
class Mix:
    """A normalised pod-shape distribution, fixed between refreshes (``version`` names it; 0 and
    up are :class:`ShapeMix`'s, negative ones fixed mixes)."""

    version: int
    shapes: tuple[tuple[Shape, float], ...]


def shape_of(pod: PodRequest) -> Shape | None:
    """A GPU pod's shape (``None``: no GPU, or MIG, which fragments MIG GPUs only)."""
    cores = -(-pod.requests.get("cpu", 0) // 1000)
    if pod.share is not None:
        held = pod.share.on_gpu(81920)  # memory asks, as a part of an 80Gi GPU
        return (cores, 0, held.milli if held is not None else WHOLE)
    if pod.gpus > 0:
        return (cores, pod.gpus, 0)
    return None


class ShapeMix:
    """The decayed histogram of the pod shapes seen: each pod once, older pods weighing less
    (a weight halves every ``half_life`` pods)."""

    def __init__(
        self, *, half_life: int = 2000, default: Mapping[Shape, float] = DEFAULT_MIX
    ) -> None:
        self._decay = 0.5 ** (1.0 / max(1, half_life))
        self._weights: dict[Shape, float] = dict(default)
        self._seen: set[str] = set()
        self._pending = 0
        self._mix = self._normalised()

    def record(self, pod: PodRequest) -> None:
        """Count ``pod``'s shape, once per pod (by UID, else name)."""
        ident = pod.uid or pod.key
        shape = shape_of(pod)
        if shape is None or ident in self._seen:
            return
        if len(self._seen) >= _SEEN_LIMIT:
            self._seen.clear()
        self._seen.add(ident)
        weights = self._weights
        for k in weights:
            weights[k] *= self._decay
        weights[shape] = weights.get(shape, 0.0) + 1.0
        if len(weights) > _MAX_SHAPES:
            del weights[min(weights, key=weights.__getitem__)]
        self._pending += 1
        if self._pending >= _REFRESH:
            self._mix = self._normalised()

    def current(self) -> Mix:
        return self._mix

    def _normalised(self) -> Mix:
        self._pending = 0
        total = sum(self._weights.values()) or 1.0
        shapes = tuple(sorted((s, w / total) for s, w in self._weights.items() if w > 0))
        return Mix(next(_VERSIONS), shapes)


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """What fragmentation reads of a node: free CPU cores and each GPU's free part (sorted),
    of which ``whole`` are wholly free."""

    cpu: int
    free: tuple[int, ...]
    whole: int

    def after(self, was: int, left: int, fresh: bool, cores: int) -> NodeRoom:
        """The room once a pod takes ``cores`` CPUs and part of a GPU whose free part goes from
        ``was`` to ``left`` (a wholly free GPU when ``fresh``)."""
        free = list(self.free)
        free.remove(was)
        if left > 0:
            free.append(left)
        return NodeRoom(self.cpu - cores, tuple(sorted(free)), self.whole - (1 if fresh else 0))

    def without_whole(self, k: int, cores: int) -> NodeRoom:
        free = list(self.free)
        for _ in range(min(k, self.whole)):
            free.remove(WHOLE)
        return NodeRoom(self.cpu - cores, tuple(free), max(0, self.whole - k))


def effective(free_milli: int, free_mib: int | None, gpu_mib: int | None) -> int:
    """A GPU's free part: the smaller of its compute and its memory, in thousandths."""
    if free_mib is None or not gpu_mib:
        return free_milli
    return min(free_milli, free_mib * WHOLE // gpu_mib)


def node_room(node: NodeInfo) -> NodeRoom:
    topo = node.topology
    free: list[int] = []
    if topo is not None:
        for i, (milli, mib) in node.share_room.items():
            free.append(effective(milli, mib, topo.gpus[i].memory_total_mib))
    whole = len(node.free_gpus) - node.unattributed_gpus
    for _ in range(min(node.unattributed_gpus, len(node.free_gpus))):
        free.remove(WHOLE)  # held by pods that did not say which GPU
    cpu = node.allocatable.get("cpu", 0) - node.requested.get("cpu", 0)
    return NodeRoom(cpu // 1000 if "cpu" in node.allocatable else 2**31, tuple(sorted(free)), whole)


_FRAG: dict[tuple[int, NodeRoom], int] = {}
_FRAG_LIMIT: Final = 100_000


def fragmentation(room: NodeRoom, mix: Mix) -> int:
    """Expected free capacity (thousandths of a GPU) that a pod drawn from ``mix`` could not
    use on a node with ``room``."""
    key = (mix.version, room)
    hit = _FRAG.get(key)
    if hit is not None:
        return hit
    free = room.free
    prefix = (0, *accumulate(free))
    total = prefix[-1]
    partial = total - WHOLE * room.whole
    out = 0.0
    for (cores, k, part), p in mix.shapes:
        if cores > room.cpu:
            out += p * total
        elif k:
            out += p * (total if room.whole < k else partial)
        else:
            out += p * prefix[bisect_left(free, part)]
    if len(_FRAG) >= _FRAG_LIMIT:
        _FRAG.clear()
    result = _FRAG[key] = round(out)
    return result


def growth(
    node: NodeInfo,
    mix: Mix,
    cores: int,
    *,
    share: tuple[int, HeldShare] | None = None,
    whole: int = 0,
) -> int:
    """How much placing a pod that takes ``cores`` CPUs and either ``share`` (a GPU index and
    what it holds there) or ``whole`` GPUs raises the fragmentation of ``node``."""
    room = node_room(node)
    before = fragmentation(room, mix)
    if share is not None:
        gpu, held = share
        topo = node.topology
        assert topo is not None
        milli, mib = node.share_room[gpu]
        gpu_mib = topo.gpus[gpu].memory_total_mib
        was = effective(milli, mib, gpu_mib)
        left = effective(
            milli - held.milli, None if mib is None else mib - held.memory_mib, gpu_mib
        )
        after = room.after(was, left, gpu not in node.shared, cores)
    else:
        after = room.without_whole(whole, cores)
    return fragmentation(after, mix) - before
