"""How fragmented a node's free GPU capacity is, against the pod shapes the cluster sees.

In the spirit of FGD (Weng et al., "Beware of Fragmentation", USENIX ATC'23): a node's free GPU
capacity is *fragmented for* a pod shape when that shape could not use it there —

- the node lacks the CPU or the memory the shape asks for: all its free GPU capacity;
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

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import accumulate, count
from typing import Final, cast

from common.podkeys import GPU_RESOURCE
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.sharing import WHOLE, HeldShare
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import PodInfo

__all__ = [
    "DEFAULT_MIX",
    "Mix",
    "NodeRoom",
    "Shape",
    "ShapeMix",
    "felt",
    "fragmentation",
    "growth",
    "node_fragmentation",
    "node_room",
    "running_shape",
    "shape_of",
]

#: (CPU cores asked, whole GPUs, thousandths of one GPU, GiB of memory asked): one of the two
#: GPU parts is 0.
Shape = tuple[int, int, int, int]

#: Before any pod is seen: the shape of the ATC'23 trace (cluster-trace-gpu-v2023): 38 % shares
#: of one GPU, 48 % one GPU, 1 % 2–8 GPUs (CPU-only pods do not weigh on GPUs).
DEFAULT_MIX: Final[Mapping[Shape, float]] = {
    (4, 0, 250, 16): 0.10,
    (4, 0, 500, 16): 0.18,
    (4, 0, 750, 16): 0.10,
    (8, 1, 0, 32): 0.59,
    (16, 2, 0, 64): 0.01,
    (32, 4, 0, 128): 0.01,
    (64, 8, 0, 256): 0.01,
}
_MAX_SHAPES: Final = 48
_REFRESH: Final = 32  # records between looks at whether the mix scoring uses is stale
#: How far (total variation: the share of weight that moved) the shapes seen may drift from the
#: mix scoring uses before it is replaced: each new mix makes every memo of growth stale.
_DRIFT: Final = 0.1
_SEEN_LIMIT: Final = 200_000
_SHARING_SEEN: Final = 0.05  # decayed shares seen above which the cluster counts as sharing


#: Mix versions, unique in the process: memos keyed by a version never mix two distributions.
_VERSIONS = count()


@dataclass(frozen=True, slots=True)
class Mix:
    """A normalised pod-shape distribution, fixed between refreshes (``version`` names it; 0 and
    up are :class:`ShapeMix`'s, negative ones fixed mixes)."""

    version: int
    shapes: tuple[tuple[Shape, float], ...]
    #: CPU cores and GiB of memory the GPU shapes ask per whole GPU, on average (derived).
    cores_per_gpu: float = field(init=False)
    gib_per_gpu: float = field(init=False)
    #: The shapes by GPU part: (whole GPUs, thousandths, ((cores, GiB, weight), ...)) (derived).
    groups: tuple[tuple[int, int, tuple[tuple[int, int, float], ...]], ...] = field(init=False)
    #: The distinct CPU and memory asks, sorted: a node's free CPU and memory matter to the
    #: per-shape part only through how many of them they cover (derived).
    cpu_steps: tuple[int, ...] = field(init=False)
    gib_steps: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        gpus = cores = gib = 0.0
        groups: dict[tuple[int, int], list[tuple[int, int, float]]] = {}
        for (c, k, part, g), p in self.shapes:
            gpus += p * (k * WHOLE + part)
            cores += p * c
            gib += p * g
            groups.setdefault((k, part), []).append((c, g, p))
        derived = {
            "cores_per_gpu": WHOLE * cores / gpus if gpus else 0.0,
            "gib_per_gpu": WHOLE * gib / gpus if gpus else 0.0,
            "groups": tuple((k, part, tuple(m)) for (k, part), m in sorted(groups.items())),
            "cpu_steps": tuple(sorted({c for (c, _, _, _), _ in self.shapes})),
            "gib_steps": tuple(sorted({g for (_, _, _, g), _ in self.shapes})),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)


def shape_of(pod: PodRequest) -> Shape | None:
    """A GPU pod's shape (``None``: no GPU, or MIG, which fragments MIG GPUs only)."""
    cores = -(-pod.requests.get("cpu", 0) // 1000)
    gib = -(-pod.requests.get("memory", 0) // 2**30)
    if pod.share is not None:
        held = pod.share.on_gpu(81920)  # memory asks, as a part of an 80Gi GPU
        return (cores, 0, held.milli if held is not None else WHOLE, gib)
    if pod.gpus > 0:
        return (cores, pod.gpus, 0, gib)
    return None


def running_shape(pod: PodInfo) -> Shape | None:
    """A running pod's shape, read as :func:`shape_of` reads a pending one's (``None``: no
    whole GPU or share)."""
    cores = -(-pod.requests.get("cpu", 0) // 1000)
    gib = -(-pod.requests.get("memory", 0) // 2**30)
    if pod.share is not None:
        return (cores, 0, pod.share.milli, gib)
    gpus = pod.requests.get(GPU_RESOURCE, 0)
    return (cores, gpus, 0, gib) if gpus > 0 else None


class ShapeMix:
    """The decayed histogram of the pod shapes seen: each pod once, older pods weighing less
    (a weight halves every ``half_life`` pods)."""

    def __init__(
        self, *, half_life: int = 2000, default: Mapping[Shape, float] = DEFAULT_MIX
    ) -> None:
        self.set_half_life(half_life)
        self._weights: dict[Shape, float] = dict(default)
        self._seen: set[str] = set()
        self._shares = 0.0  # decayed count of the shares seen (not the default's)
        self._pending = 0
        self._paused = 0
        self._mix = self._normalised()

    def set_half_life(self, half_life: int) -> None:
        """From now on a weight halves every ``half_life`` pods."""
        self._decay = 0.5 ** (1.0 / max(1, half_life))

    def record(self, pod: PodRequest) -> None:
        """Count ``pod``'s shape, once per pod (by UID, else name); nothing while paused."""
        if self._paused:
            return
        self._count(pod.uid or pod.key, shape_of(pod), pod.share is not None)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Pods seen meanwhile are not counted (what-if cycles)."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def record_running(self, pods: Iterable[PodInfo]) -> None:
        """Count the shapes of pods already running (by any scheduler), once per pod: a
        coordinator that starts or reloads its settings sees the cluster's own mix at once
        instead of the default one. They count as one arrival (their order is not known): each
        weighs 1 and what was seen before fades as that many pods make it fade — one pass, not
        one per pod (a cluster may run tens of thousands)."""
        counts: dict[Shape, int] = {}
        shares = 0
        for pod in pods:
            shape = running_shape(pod)
            if shape is not None and self._first_sight(pod.uid or pod.key):
                counts[shape] = counts.get(shape, 0) + 1
                shares += pod.share is not None
        if counts:
            self._add(counts, shares)
            self._refresh()  # read at once, not after the next few pods

    def _count(self, ident: str, shape: Shape | None, shared: bool) -> None:
        if shape is None or not self._first_sight(ident):
            return
        self._add({shape: 1}, int(shared))
        self._pending += 1
        if self._pending >= _REFRESH:
            self._refresh()

    def _first_sight(self, ident: str) -> bool:
        if ident in self._seen:
            return False
        if len(self._seen) >= _SEEN_LIMIT:
            self._seen.clear()
        self._seen.add(ident)
        return True

    def _add(self, counts: Mapping[Shape, int], shares: int) -> None:
        fade = self._decay ** sum(counts.values())
        weights = self._weights
        for k in weights:
            weights[k] *= fade
        for shape, n in counts.items():
            weights[shape] = weights.get(shape, 0.0) + n
        self._shares = self._shares * fade + shares
        while len(weights) > _MAX_SHAPES:
            del weights[min(weights, key=weights.__getitem__)]

    def _refresh(self) -> None:
        self._pending = 0
        shapes = self._shapes()
        old = dict(self._mix.shapes)
        moved = sum(abs(w - old.pop(s, 0.0)) for s, w in shapes) + sum(old.values())
        if moved / 2 >= _DRIFT:
            self._mix = Mix(next(_VERSIONS), shapes)

    @property
    def sharing(self) -> bool:
        """Whether pods sharing a GPU were seen lately (within some four half-lives)."""
        return self._shares > _SHARING_SEEN

    def current(self) -> Mix:
        return self._mix

    def _normalised(self) -> Mix:
        self._pending = 0
        return Mix(next(_VERSIONS), self._shapes())

    def _shapes(self) -> tuple[tuple[Shape, float], ...]:
        total = sum(self._weights.values()) or 1.0
        return tuple(sorted((s, w / total) for s, w in self._weights.items() if w > 0))


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """What fragmentation reads of a node: free CPU cores and each GPU's free part (sorted),
    of which ``whole`` are wholly free, and free memory (GiB)."""

    cpu: int
    free: tuple[int, ...]
    whole: int
    memory: int = 2**31

    def after(self, was: int, left: int, fresh: bool, cores: int, gib: int) -> NodeRoom:
        """The room once a pod takes ``cores`` CPUs, ``gib`` of memory and part of a GPU whose
        free part goes from ``was`` to ``left`` (a wholly free GPU when ``fresh``)."""
        free = list(self.free)
        free.remove(was)
        if left > 0:
            free.append(left)
        whole = self.whole - (1 if fresh else 0)
        return NodeRoom(self.cpu - cores, tuple(sorted(free)), whole, self.memory - gib)

    def without_whole(self, k: int, cores: int, gib: int) -> NodeRoom:
        free = list(self.free)
        for _ in range(min(k, self.whole)):
            free.remove(WHOLE)
        return NodeRoom(self.cpu - cores, tuple(free), max(0, self.whole - k), self.memory - gib)


def effective(free_milli: int, free_mib: int | None, gpu_mib: int | None) -> int:
    """A GPU's free part: the smaller of its compute and its memory, in thousandths."""
    if free_mib is None or not gpu_mib:
        return free_milli
    return min(free_milli, free_mib * WHOLE // gpu_mib)


_ROOM: Final = object()  # NodeInfo.memo key of the node's room (a NodeInfo never changes)


def node_room(node: NodeInfo) -> NodeRoom:
    room = node.memo.get(_ROOM)
    if room is None:
        room = node.memo[_ROOM] = _room(node)
    return cast(NodeRoom, room)


def _room(node: NodeInfo) -> NodeRoom:
    topo = node.topology
    free: list[int] = []
    if topo is not None:
        for i, (milli, mib) in node.share_room.items():
            free.append(effective(milli, mib, topo.gpus[i].memory_total_mib))
    whole = len(node.free_gpus) - node.unattributed_gpus
    for _ in range(min(node.unattributed_gpus, len(node.free_gpus))):
        free.remove(WHOLE)  # held by pods that did not say which GPU
    cpu = node.allocatable.get("cpu", 0) - node.requested.get("cpu", 0)
    memory = node.allocatable.get("memory", 0) - node.requested.get("memory", 0)
    return NodeRoom(
        cpu // 1000 if "cpu" in node.allocatable else 2**31,
        tuple(sorted(free)),
        whole,
        memory // 2**30 if "memory" in node.allocatable else 2**31,
    )


_FRAG: dict[tuple[object, ...], float] = {}
_FRAG_LIMIT: Final = 100_000
#: Growth per (mix version, room, pod CPU and memory, what it takes): alike nodes share it, and
#: the share chooser's ranking and the score ask the same question.
_GROWTH: dict[tuple[object, ...], int] = {}


def fragmentation(room: NodeRoom, mix: Mix) -> int:
    """Expected free capacity (thousandths of a GPU) that a pod drawn from ``mix`` could not
    use on a node with ``room``, plus what its free CPU and memory leave :func:`stranded`."""
    free = room.free
    total = sum(free)
    if not total:
        return 0
    key = (
        mix.version,
        free,
        room.whole,
        bisect_right(mix.cpu_steps, room.cpu),
        bisect_right(mix.gib_steps, room.memory),
    )
    per_shape = _FRAG.get(key)
    if per_shape is None:
        per_shape = _per_shape(room, total, mix)
        if len(_FRAG) >= _FRAG_LIMIT:
            _FRAG.clear()
        _FRAG[key] = per_shape
    return round(per_shape + stranded(room, total, mix))


def _per_shape(room: NodeRoom, total: int, mix: Mix) -> float:
    free = room.free
    partial = total - WHOLE * room.whole
    cpu, memory = room.cpu, room.memory
    out = 0.0
    prefix: tuple[int, ...] | None = None
    for k, part, members in mix.groups:
        if k:
            lost = total if room.whole < k else partial
        else:
            if prefix is None:
                prefix = (0, *accumulate(free))
            lost = prefix[bisect_left(free, part)]
        for cores, gib, p in members:
            out += p * (lost if cores <= cpu and gib <= memory else total)
    return out


def stranded(room: NodeRoom, total: int, mix: Mix) -> float:
    """Free GPU capacity the node's free CPU and memory cannot feed at the mix's CPU and memory
    per GPU: what pods of the usual shape would leave behind once the node's CPU (or memory)
    runs out, however they are cut."""
    fed = float(total)
    if mix.cores_per_gpu > 0:
        fed = min(fed, WHOLE * room.cpu / mix.cores_per_gpu)
    if mix.gib_per_gpu > 0:
        fed = min(fed, WHOLE * room.memory / mix.gib_per_gpu)
    return total - max(0.0, fed)


def growth(
    node: NodeInfo,
    mix: Mix,
    cores: int,
    *,
    share: tuple[int, HeldShare] | None = None,
    whole: int = 0,
    gib: int = 0,
) -> int:
    """How much placing a pod that takes ``cores`` CPUs, ``gib`` of memory and either ``share``
    (a GPU index and what it holds there) or ``whole`` GPUs raises the fragmentation of
    ``node``."""
    room = node_room(node)
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
        fresh = gpu not in node.shared
        change: tuple[int, ...] = (was, left, fresh)
    else:
        change = (whole,)
    # Ints and tuples of ints only: such keys are untracked by the garbage collector, whose
    # full collections would otherwise walk every entry (the room object is tracked).
    key = (mix.version, room.free, room.whole, room.cpu, room.memory, cores, gib, change)
    hit = _GROWTH.get(key)
    if hit is not None:
        return hit
    if share is not None:
        after = room.after(was, left, fresh, cores, gib)
    else:
        after = room.without_whole(whole, cores, gib)
    if len(_GROWTH) >= _FRAG_LIMIT:
        _GROWTH.clear()
    result = _GROWTH[key] = fragmentation(after, mix) - node_fragmentation(node, mix)
    return result


def felt(room: NodeRoom, mix: Mix, cores: int, gib: int) -> tuple[int, int]:
    """The free CPU cores and GiB of a node with ``room`` as far as :func:`growth` under a pod
    taking ``cores`` and ``gib`` (and free GPU capacity, never adding any) tells them apart.
    Beyond the largest ask of the mix and what feeding all the node's free GPUs at the mix's
    CPU and memory per GPU takes, both before and after the pod, more changes nothing: nodes
    with more are keyed alike."""
    total = sum(room.free)
    cpu = (
        cores
        + 1
        + max(mix.cpu_steps[-1] if mix.cpu_steps else 0, total * mix.cores_per_gpu // WHOLE)
    )
    memory = (
        gib + 1 + max(mix.gib_steps[-1] if mix.gib_steps else 0, total * mix.gib_per_gpu // WHOLE)
    )
    return min(room.cpu, int(cpu)), min(room.memory, int(memory))


def node_fragmentation(node: NodeInfo, mix: Mix) -> int:
    """:func:`fragmentation` of the node's room now, kept on the node per mix (every pod scored
    there asks it; a changed node is a new NodeInfo)."""
    key = (_ROOM, mix.version)
    hit = node.memo.get(key)
    if hit is None:
        hit = node.memo[key] = fragmentation(node_room(node), mix)
    return cast(int, hit)
