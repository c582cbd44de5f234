"""The baselines' cluster: per node, free CPU, memory and each GPU's free milli; nothing else.

A pod fits a node when the node has its CPU and memory left and ``gpus`` GPUs with at least
``per_gpu`` milli free each (a whole GPU is 1,000 milli free). :meth:`Cluster.place` refuses a
choice that does not fit, so no policy can over-commit. ``whole=True`` is the cluster of a
scheduler without sharing: a fractional pod takes a whole GPU (it still counts only its own
milli as allocated — the paper's metric is the GPU demand served).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.sharing.trace import MILLI, PodShape, TraceNode

__all__ = ["Choice", "Cluster", "NodeState"]


class NodeState:
    __slots__ = ("cpu_left", "free", "free_total", "full", "index", "key", "mem_left", "shape")

    def __init__(self, index: int, node: TraceNode) -> None:
        self.index = index
        self.shape = node.shape
        self.cpu_left = node.shape.cpu_milli
        self.mem_left = node.shape.memory_mib
        self.free = [MILLI] * node.shape.gpus  # free milli per GPU
        self.free_total = MILLI * node.shape.gpus
        self.full = node.shape.gpus  # GPUs with nothing on them
        self.key: int | None = None  # a policy's token for this state; None after a change

    def fits(self, shape: PodShape, per_gpu: int) -> bool:
        if self.cpu_left < shape.cpu_milli or self.mem_left < shape.memory_mib:
            return False
        if shape.gpus == 0:
            return True
        if per_gpu == MILLI:
            return self.full >= shape.gpus
        return any(f >= per_gpu for f in self.free)

    def usable(self, per_gpu: int) -> list[int]:
        """GPU indices with at least ``per_gpu`` milli free."""
        return [i for i, f in enumerate(self.free) if f >= per_gpu]


@dataclass(frozen=True, slots=True)
class Choice:
    node: int
    gpus: tuple[int, ...] = ()  # each gives the pod its per-GPU milli


class Cluster:
    def __init__(self, nodes: Sequence[TraceNode], *, whole: bool = False) -> None:
        self.nodes = [NodeState(i, n) for i, n in enumerate(nodes)]
        self.whole = whole
        self.capacity = sum(len(n.free) for n in self.nodes) * MILLI
        self.max_cpu = max((n.shape.cpu_milli for n in self.nodes), default=1)
        self.max_gpu = max((len(n.free) * MILLI for n in self.nodes), default=MILLI) or MILLI
        self.allocated = 0  # GPU milli the placed pods asked for
        self.held = 0  # GPU milli taken from the nodes (more than allocated when whole)

    def per_gpu(self, shape: PodShape) -> int:
        """Milli a pod takes from each of its GPUs here."""
        return MILLI if self.whole and shape.fractional else shape.gpu_milli

    def place(self, shape: PodShape, choice: Choice) -> None:
        node = self.nodes[choice.node]
        per = self.per_gpu(shape)
        if len(set(choice.gpus)) != shape.gpus or not node.fits(shape, per):
            raise ValueError(f"{shape} does not fit node {choice.node} as {choice.gpus}")
        if any(node.free[g] < per for g in choice.gpus):
            raise ValueError(f"{shape}: GPUs {choice.gpus} of node {choice.node} lack {per} milli")
        node.cpu_left -= shape.cpu_milli
        node.mem_left -= shape.memory_mib
        for g in choice.gpus:
            if node.free[g] == MILLI:
                node.full -= 1
            node.free[g] -= per
        node.free_total -= per * shape.gpus
        node.key = None
        self.allocated += shape.demand
        self.held += per * shape.gpus
