"""A workload with the shape of Alibaba's cluster-trace-gpu-v2023 (the ATC'23 FGD paper's).

The cluster is the trace's 1,213 GPU nodes (``node_shapes.csv``: model, GPUs, CPU, memory per
node, counted by shape), scaled by ``scale`` with the proportions of each shape kept. Pods are
drawn independently from the trace's 8,152 pods (``pod_shapes.csv``: GPUs, GPU milli, CPU,
memory, counted by shape), so a seed's arrivals have the trace's mix — 37.8 % fractional,
48.0 % one whole GPU, 0.9 % 2–8 GPUs, 13.3 % no GPU — with each class's own CPU and memory
asks. They arrive until the arrived GPU demand would pass ``ratio`` × the cluster's GPU capacity
(the paper's workload inflation: it appends pods sampled from the trace until the demand is 1.3×
capacity).

The arrivals are a trace of the simulator's format (:mod:`coordinator.sim.trace`, one pod per
job, one second apart, a share as ``gpu_fraction``: :func:`jobs`), the nodes what the inventory
builds for them (:func:`node_infos`: allocatable CPU, memory, ``nvidia.com/gpu``, the
``topos.io/gpu.product`` label, a hardware topology — the DGX-1 NVLink mesh for 8-GPU V100
nodes, PCIe switch pairs otherwise; the trace says nothing of NUMA, so there is none).
"""

from __future__ import annotations

import csv
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agent.devices import discover_profile
from common.labels import GPU_PRODUCT
from common.model import Gpu, NodeTopology
from common.podkeys import GPU_RESOURCE
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.sim.baselines.sharing import Shape
from coordinator.sim.trace import Job

__all__ = [
    "MILLI",
    "NodeShape",
    "PodShape",
    "TraceNode",
    "Workload",
    "cluster",
    "jobs",
    "node_infos",
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
            # named in the trace's order (first-fit's order)
            nodes.append(TraceNode(f"n{len(nodes):04d}-{shape.model.lower()}", shape))
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


def popularity(shapes: Sequence[tuple[PodShape, int]]) -> list[tuple[Shape, float]]:
    """The target workload as FGD sees it: each shape (GPUs, GPU milli, CPU; memory is not part
    of the paper's measure) with its share of the pods, commonest first."""
    counts: dict[Shape, int] = {}
    for shape, count in shapes:
        key = Shape(shape.gpus, shape.gpu_milli if shape.gpus else 0, shape.cpu_milli)
        counts[key] = counts.get(key, 0) + count
    total = sum(counts.values())
    return sorted(((s, c / total) for s, c in counts.items()), key=lambda sc: -sc[1])


def jobs(work: Workload, *, fraction: bool = True) -> list[Job]:
    """The arrivals as a trace: pod ``i`` is job ``p<i>`` arriving at second ``i``. A share asks
    ``gpu_fraction`` (``fraction``) or, without, one whole GPU (a scheduler without sharing).
    Durations do not count: in the paper's replay nothing leaves."""
    out = []
    for i, shape in enumerate(work.pods):
        share = shape.fractional and fraction
        out.append(
            Job(
                job_id=f"p{i:05d}",
                arrival_s=float(i),
                duration_s=1.0,
                gpus=shape.gpus,
                cpu=round(shape.cpu_milli / 1000, 3),
                memory_gib=round(shape.memory_mib / 1024, 6),  # as a trace file holds it
                gpu_fraction=shape.gpu_milli / MILLI if share else None,
            )
        )
    return out


PRODUCTS: Final = {
    "V100M16": ("Tesla-V100-SXM2-16GB", 16384),
    "V100M32": ("Tesla-V100-SXM2-32GB", 32768),
    "P100": ("Tesla-P100-PCIE-16GB", 16384),
    "T4": ("Tesla-T4", 15360),
    "A10": ("NVIDIA-A10", 23028),
}
_PCIE_8: Final = (  # two sockets, PCIe switch pairs (the pcie-8x profile's matrix)
    "X PIX NODE NODE SYS SYS SYS SYS",
    "PIX X NODE NODE SYS SYS SYS SYS",
    "NODE NODE X PIX SYS SYS SYS SYS",
    "NODE NODE PIX X SYS SYS SYS SYS",
    "SYS SYS SYS SYS X PIX NODE NODE",
    "SYS SYS SYS SYS PIX X NODE NODE",
    "SYS SYS SYS SYS NODE NODE X PIX",
    "SYS SYS SYS SYS NODE NODE PIX X",
)


def _links(shape: NodeShape) -> tuple[tuple[str, ...], ...]:
    n = shape.gpus
    if n == 8 and shape.model.startswith("V100"):
        return discover_profile("dgx1-v100", hostname="v100").links
    if n > 8:
        raise ValueError(f"no link matrix for {n} GPUs")
    return tuple(tuple(row.split()[:n]) for row in _PCIE_8[:n])


def topology(shape: NodeShape, name: str) -> NodeTopology:
    """Node ``name``'s hardware (GPU UUIDs of its own: the inventory refuses a device two nodes
    report)."""
    product, memory = PRODUCTS.get(shape.model, (shape.model, None))
    gpus = tuple(
        Gpu(index=i, uuid=f"GPU-{name}-{i}", product=product, memory_total_mib=memory)
        for i in range(shape.gpus)
    )
    return NodeTopology(
        hostname=name,
        gpus=gpus,
        links=_links(shape),
        cpu_count=shape.cpu_milli // 1000,
        memory_mib=shape.memory_mib,
        source=f"trace:{shape.model}",
    )


def node_infos(nodes: Sequence[TraceNode]) -> list[NodeInfo]:
    out = []
    for node in nodes:
        shape = node.shape
        product = PRODUCTS.get(shape.model, (shape.model, None))[0]
        out.append(
            NodeInfo.build(
                node.name,
                labels={GPU_PRODUCT: product},
                allocatable={
                    "cpu": shape.cpu_milli,
                    "memory": shape.memory_mib * 2**20,
                    "pods": 256,  # never the binding limit here (the paper's model has none)
                    GPU_RESOURCE: shape.gpus,
                },
                topology=topology(shape, node.name),
            )
        )
    return out
