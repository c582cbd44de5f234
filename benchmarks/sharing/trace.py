"""A workload with the shape of Alibaba's cluster-trace-gpu-v2023 (the ATC'23 FGD paper's).

The cluster is the trace's 1,213 GPU nodes (``node_shapes.csv``: model, GPUs, CPU, memory per
node, counted by shape), scaled by ``scale`` with the proportions of each shape kept. Pods are
drawn independently from the trace's 8,152 pods (``pod_shapes.csv``: GPUs, GPU milli, CPU,
memory, counted by shape), so a seed's arrivals have the trace's mix — 37.8 % fractional,
48.0 % one whole GPU, 0.9 % 2–8 GPUs, 13.3 % no GPU — with each class's own CPU and memory
asks. They arrive until the arrived GPU demand would pass ``ratio`` × the cluster's GPU capacity
(the paper's workload inflation: it appends pods sampled from the trace until the demand is 1.3×
capacity).
"""

from __future__ import annotations

import csv
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "MILLI",
    "NodeShape",
    "PodShape",
    "TraceNode",
    "Workload",
    "cluster",
    "node_shapes",
    "pod_shapes",
    "popularity",
    "workload",
]

MILLI: Final = 1000  # one whole GPU
HERE: Final = Path(__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class PodShape:
    """What a pod asks: ``gpus`` GPUs of ``gpu_milli`` each (a share of one GPU when < 1000)."""

    gpus: int
    gpu_milli: int
    cpu_milli: int
    memory_mib: int

    @property
    def demand(self) -> int:
        """GPU milli the pod asks for in all (what the paper's metric counts)."""
        return self.gpus * self.gpu_milli

    @property
    def fractional(self) -> bool:
        return self.gpus == 1 and self.gpu_milli < MILLI

    @property
    def kind(self) -> str:
        if self.gpus == 0:
            return "cpu-only"
        if self.fractional:
            return "fractional"
        return "1 GPU" if self.gpus == 1 else "2-8 GPUs"


@dataclass(frozen=True, slots=True)
class NodeShape:
    model: str
    gpus: int
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    shape: NodeShape


@dataclass(frozen=True, slots=True)
class Workload:
    nodes: tuple[TraceNode, ...]
    pods: tuple[PodShape, ...]  # in arrival order
    seed: int

    @property
    def capacity(self) -> int:
        """The cluster's GPU milli."""
        return sum(n.shape.gpus for n in self.nodes) * MILLI


def _rows(name: str) -> Iterator[dict[str, str]]:
    with (HERE / name).open() as f:
        yield from csv.DictReader(line for line in f if not line.startswith("#"))


def pod_shapes() -> list[tuple[PodShape, int]]:
    """The trace's pod shapes with how many of its pods have each."""
    return [
        (
            PodShape(
                int(r["gpus"]), int(r["gpu_milli"]), int(r["cpu_milli"]), int(r["memory_mib"])
            ),
            int(r["count"]),
        )
        for r in _rows("pod_shapes.csv")
    ]


def node_shapes() -> list[tuple[NodeShape, int]]:
    """The trace's GPU node shapes with how many of its nodes have each."""
    return [
        (
            NodeShape(r["model"], int(r["gpus"]), int(r["cpu_milli"]), int(r["memory_mib"])),
            int(r["count"]),
        )
        for r in _rows("node_shapes.csv")
    ]


def cluster(scale: float = 1.0) -> tuple[TraceNode, ...]:
    """The trace's nodes, ``scale`` × as many (largest remainder: every shape keeps its share,
    at least one node of the commonest shape)."""
    if not 0 < scale <= 10:
        raise ValueError(f"scale must be in (0, 10], not {scale}")
    shapes = node_shapes()
    total = sum(c for _, c in shapes)
    want = max(1, round(total * scale))
    exact = [c * want / total for _, c in shapes]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(shapes)), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in by_remainder[: want - sum(counts)]:
        counts[i] += 1
    nodes: list[TraceNode] = []
    for (shape, _), count in zip(shapes, counts, strict=True):
        for _ in range(count):
            nodes.append(TraceNode(f"{shape.model.lower()}-{len(nodes):04d}", shape))
    return tuple(nodes)


def arrivals(
    shapes: Sequence[tuple[PodShape, int]], capacity: int, seed: int, ratio: float
) -> tuple[PodShape, ...]:
    """Pods drawn from ``shapes`` (weighted by count) until the next would take the arrived GPU
    demand past ``ratio`` × ``capacity``."""
    rng = random.Random(seed)
    population = [s for s, _ in shapes]
    weights = [c for _, c in shapes]
    limit = ratio * capacity
    pods: list[PodShape] = []
    arrived = 0
    while True:
        pod = rng.choices(population, weights)[0]
        if arrived + pod.demand > limit:
            return tuple(pods)
        arrived += pod.demand
        pods.append(pod)


def workload(scale: float = 1.0, seed: int = 0, ratio: float = 1.3) -> Workload:
    nodes = cluster(scale)
    capacity = sum(n.shape.gpus for n in nodes) * MILLI
    return Workload(nodes, arrivals(pod_shapes(), capacity, seed, ratio), seed)


def popularity(shapes: Sequence[tuple[PodShape, int]]) -> list[tuple[PodShape, float]]:
    """The target workload as FGD sees it: each shape (GPUs, GPU milli, CPU; memory is not part
    of the paper's measure) with its share of the pods, commonest first."""
    counts: dict[PodShape, int] = {}
    for shape, count in shapes:
        key = PodShape(shape.gpus, shape.gpu_milli, shape.cpu_milli, 0)
        counts[key] = counts.get(key, 0) + count
    total = sum(counts.values())
    return sorted(((s, c / total) for s, c in counts.items()), key=lambda sc: -sc[1])
