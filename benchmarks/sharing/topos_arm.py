"""The Topos arm: the same arrivals through the production scheduling core.

Each trace node becomes a :class:`~coordinator.core.snapshot.nodeinfo.NodeInfo` as the inventory
builds it (allocatable CPU, memory, ``nvidia.com/gpu``, the ``topos.io/gpu.product`` label, a
hardware topology: the DGX-1 NVLink mesh for 8-GPU V100 nodes, PCIe switch pairs otherwise; the
trace says nothing of NUMA, so there is none). Each pod is a Pod object (``parse_pod``), decided
by ``schedule_one`` with the default profile and configuration and held by ``Snapshot.assume`` —
what the scheduler loop does, minus the API server, with the garbage collector as the coordinator
runs it once its inventory has synced (what was built frozen out of its passes, steady
thresholds: :func:`coordinator.app.collector.settle`).

Modes: ``whole`` — a fractional pod asks ``nvidia.com/gpu: 1`` (all Topos offers without
sharing); ``fraction`` — it asks ``topos.io/gpu-fraction`` and no ``nvidia.com/gpu``. Whether
the build honours that annotation is found out first (:func:`fraction_support`) on a one-GPU
node: 0.6 + 0.6 must not both fit, 0.6 + 0.4 must.

Every decision is checked against a ledger kept here: CPU and memory within each node's, a whole
GPU never given twice, a GPU's shares never above 1,000 milli.
"""

from __future__ import annotations

import gc
import hashlib
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final

from agent.devices import discover_profile
from benchmarks.sharing.trace import MILLI, NodeShape, PodShape, TraceNode, Workload
from common.labels import GPU_PRODUCT
from common.model import Gpu, NodeTopology
from common.podkeys import GPU_RESOURCE
from coordinator.app.collector import settle
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot

__all__ = ["FRACTION_KEY", "ToposRun", "fraction_support", "node_infos", "pod_object", "replay"]

FRACTION_KEY: Final = "topos.io/gpu-fraction"
NAMESPACE: Final = "trace"
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


def topology(shape: NodeShape) -> NodeTopology:
    product, memory = PRODUCTS.get(shape.model, (shape.model, None))
    gpus = tuple(
        Gpu(index=i, uuid=f"GPU-{shape.model}-{i}", product=product, memory_total_mib=memory)
        for i in range(shape.gpus)
    )
    return NodeTopology(
        hostname=shape.model,
        gpus=gpus,
        links=_links(shape),
        cpu_count=shape.cpu_milli // 1000,
        memory_mib=shape.memory_mib,
        source=f"trace:{shape.model}",
    )


def node_infos(nodes: Sequence[TraceNode]) -> list[NodeInfo]:
    topologies: dict[NodeShape, NodeTopology] = {}
    out = []
    for node in nodes:
        shape = node.shape
        if shape not in topologies:
            topologies[shape] = topology(shape)
        product = PRODUCTS.get(shape.model, (shape.model, None))[0]
        out.append(
            NodeInfo.build(
                node.name,
                labels={GPU_PRODUCT: product},
                allocatable={
                    "cpu": shape.cpu_milli,
                    "memory": shape.memory_mib * 2**20,
                    "pods": 256,  # never the binding limit here (the baselines have none)
                    GPU_RESOURCE: shape.gpus,
                },
                topology=topologies[shape],
            )
        )
    return out


def pod_object(name: str, shape: PodShape, *, fraction: bool) -> dict[str, object]:
    """The Pod a user would write for ``shape``."""
    requests: dict[str, str] = {"cpu": f"{shape.cpu_milli}m", "memory": f"{shape.memory_mib}Mi"}
    limits: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if shape.fractional and fraction:
        annotations[FRACTION_KEY] = f"{shape.gpu_milli / MILLI:g}"
    elif shape.gpus:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(shape.gpus)
    resources: dict[str, object] = {"requests": requests}
    if limits:
        resources["limits"] = limits
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": "topos",
            "containers": [{"name": "main", "image": "trace", "resources": resources}],
        },
    }


def _named(device_ids: Sequence[str]) -> tuple[int, ...]:
    """GPU indices from a decision's device ids (``GPU-<model>-<index>``, see :func:`topology`),
    for a placement that names its GPUs only there."""
    out = []
    for device in device_ids:
        index = device.rsplit("-", 1)[-1]
        if device.startswith("GPU-") and index.isdigit():
            out.append(int(index))
    return tuple(out)


def _request(name: str, shape: PodShape, *, fraction: bool) -> PodRequest:
    parsed = parse_pod(pod_object(name, shape, fraction=fraction))
    if not isinstance(parsed, PodRequest):
        raise ValueError(f"{name}: {parsed.text}")
    return parsed


@dataclass
class Ledger:
    """What the decisions hold, counted here; ``violations`` names every over-commitment."""

    nodes: Mapping[str, NodeShape]
    cpu: dict[str, int] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    gpu: dict[tuple[str, int], int] = field(default_factory=dict)  # milli held per GPU
    holders: dict[tuple[str, int], int] = field(default_factory=dict)  # pods per GPU
    unplaced_shares: dict[str, int] = field(default_factory=dict)  # milli on no named GPU
    violations: list[str] = field(default_factory=list)

    def hold(self, node: str, shape: PodShape, gpus: tuple[int, ...], *, whole: bool) -> None:
        limit = self.nodes[node]
        self.cpu[node] = self.cpu.get(node, 0) + shape.cpu_milli
        self.memory[node] = self.memory.get(node, 0) + shape.memory_mib
        if self.cpu[node] > limit.cpu_milli or self.memory[node] > limit.memory_mib:
            self.violations.append(f"{node}: CPU or memory over-committed")
        if shape.gpus == 0:
            return
        per = MILLI if whole or not shape.fractional else shape.gpu_milli
        if shape.fractional and not whole and not gpus:
            held = self.unplaced_shares.get(node, 0) + per
            self.unplaced_shares[node] = held
            if held + sum(v for (n, _), v in self.gpu.items() if n == node) > limit.gpus * MILLI:
                self.violations.append(f"{node}: GPU shares above its GPUs")
            return
        if len(set(gpus)) != shape.gpus or any(not 0 <= g < limit.gpus for g in gpus):
            self.violations.append(f"{node}: {shape.gpus} GPU(s) asked, got {gpus}")
        for g in gpus:
            self.gpu[(node, g)] = self.gpu.get((node, g), 0) + per
            self.holders[(node, g)] = self.holders.get((node, g), 0) + 1
            if self.gpu[(node, g)] > MILLI:
                self.violations.append(f"{node} GPU {g}: {self.gpu[(node, g)]} milli held")


@dataclass
class ToposRun:
    placed: int
    allocated: list[int]  # GPU milli allocated after each arrival
    seconds: float  # deciding and assuming, all pods
    violations: list[str]
    shared_gpus: int  # GPUs the decisions gave to more than one pod
    #: sha256 (first 12 hex digits) of every decision in order: the node and GPUs chosen, or the
    #: failure's message — equal digests, the same decisions and messages
    digest: str = ""


@contextmanager
def steady_collector() -> Iterator[None]:
    """The garbage collector as the coordinator runs it once its inventory has synced
    (:func:`coordinator.app.collector.settle`: what exists is frozen out of the collector's
    passes, higher thresholds), for the replay only; Python's defaults again after."""
    thresholds = gc.get_threshold()
    gc.collect()
    settle()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def replay(work: Workload, *, fraction: bool, framework: Framework | None = None) -> ToposRun:
    framework = framework or build_framework()
    snapshot = Snapshot(node_infos(work.nodes), namespaces={NAMESPACE: {}})
    ledger = Ledger({n.name: n.shape for n in work.nodes})
    requests = [
        _request(f"p{i:05d}", shape, fraction=fraction) for i, shape in enumerate(work.pods)
    ]
    allocated: list[int] = []
    total = placed = 0
    spent = 0.0
    digest = hashlib.sha256()
    with steady_collector():
        for shape, pod in zip(work.pods, requests, strict=True):
            t0 = time.perf_counter()
            result = schedule_one(pod, snapshot, framework)
            if isinstance(result, Decision):
                snapshot.assume(pod, result.node, result.placement)
            spent += time.perf_counter() - t0
            if not isinstance(result, Decision):
                digest.update(f"{result.message}|".encode())
            else:
                gpus = result.placement.gpus or _named(result.device_ids)
                digest.update(f"{result.node} {gpus} {result.placement.share}|".encode())
                ledger.hold(result.node, shape, gpus, whole=not fraction)
                placed += 1
                total += shape.demand
            allocated.append(total)
    shared = sum(1 for n in ledger.holders.values() if n > 1)
    return ToposRun(placed, allocated, spent, ledger.violations, shared, digest.hexdigest()[:12])


def fraction_support(framework: Framework | None = None) -> str | None:
    """None when this build shares a GPU between pods asking ``topos.io/gpu-fraction``;
    otherwise what it does instead."""
    framework = framework or build_framework()
    node = TraceNode("probe", NodeShape("V100M16", 1, 64000, 262144))
    snapshot = Snapshot(node_infos([node]), namespaces={NAMESPACE: {}})
    outcome = []
    for i, milli in enumerate((600, 600, 400)):
        pod = _request(f"probe-{i}", PodShape(1, milli, 1000, 1024), fraction=True)
        result = schedule_one(pod, snapshot, framework)
        if isinstance(result, Decision):
            snapshot.assume(pod, result.node, result.placement)
        outcome.append(isinstance(result, Decision))
    if outcome == [True, False, True]:
        return None
    if all(outcome):
        return "the annotation is ignored (fractional pods placed as if they asked for no GPU)"
    return "a fractional ask takes a whole GPU"
