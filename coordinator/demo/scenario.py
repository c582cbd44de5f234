"""The demo's cluster and workload.

**Cluster** — 32 nodes, two spines of two leaves each:

======  =======  ==========================================================================
spine   leaf     nodes
======  =======  ==========================================================================
spine-1 leaf-1   ``h100-01`` … ``h100-08``: DGX H100 (8× H100 on NVSwitch, 2 NUMA nodes)
spine-1 leaf-2   ``h100-09`` … ``h100-16``: DGX H100
spine-2 leaf-3   ``a100-01`` … ``a100-06``: DGX A100 (8× A100 on NVSwitch, 8 NUMA nodes);
                 ``a100mig-01``, ``a100mig-02``: DGX A100 with MIG on every GPU
spine-2 leaf-4   ``l40s-01`` … ``l40s-06``: 8× L40S on PCIe switches, two sockets;
                 ``mig-01``, ``mig-02``: one A100 split 3g.20gb + 2g.10gb + 1g.5gb
======  =======  ==========================================================================

**Workload** — what a shared ML/HPC cluster sees in a morning, written as users write it (only
``schedulerName: topos`` added): multi-node training gangs (a leaf's worth, two nodes, one that
must wait for room), NUMA-pinned HPC pods, MIG inference pods, rendering pairs on PCIe, notebooks
on one GPU and notebooks on part of one, a 4-GPU job that wants NVLink, and one pod no node can
hold. Phase 2 finishes some of the work (the first pretraining run and the notebooks on one GPU
end), and the pretraining run that waited gets the leaf that was freed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from common import labels as L
from common import podkeys

__all__ = [
    "DEMO_NAMESPACE",
    "JOB_LABEL",
    "DemoJob",
    "DemoNode",
    "demo_nodes",
    "demo_workload",
]

DEMO_NAMESPACE: Final = "demo"
JOB_LABEL: Final = "demo.topos.io/job"
H100: Final = "NVIDIA-H100-80GB-HBM3"
A100: Final = "NVIDIA-A100-SXM4-40GB"
L40S: Final = "NVIDIA-L40S"
PRODUCT: Final = L.GFD_GPU_PRODUCT  # GPU Feature Discovery's name: existing YAML works


@dataclass(frozen=True, slots=True)
class DemoNode:
    name: str
    profile: str
    leaf: str
    spine: str

    @property
    def labels(self) -> dict[str, str]:
        return {L.LEAF: self.leaf, L.SPINE: self.spine}


def demo_nodes() -> list[DemoNode]:
    out: list[DemoNode] = []
    for i in range(1, 17):
        leaf = "leaf-1" if i <= 8 else "leaf-2"
        out.append(DemoNode(f"h100-{i:02d}", "dgx-h100", leaf, "spine-1"))
    out += [DemoNode(f"a100-{i:02d}", "dgx-a100", "leaf-3", "spine-2") for i in range(1, 7)]
    out += [DemoNode(f"a100mig-{i:02d}", "dgx-a100-mig", "leaf-3", "spine-2") for i in (1, 2)]
    out += [DemoNode(f"l40s-{i:02d}", "pcie-8x", "leaf-4", "spine-2") for i in range(1, 7)]
    out += [DemoNode(f"mig-{i:02d}", "a100-mig", "leaf-4", "spine-2") for i in (1, 2)]
    return out


@dataclass(frozen=True, slots=True)
class DemoJob:
    name: str
    kind: str  # what a reader should expect, e.g. "gang 8×8 GPU H100"
    pods: tuple[Mapping[str, Any], ...]
    phase: int = 1  # submitted in phase 1 or 2
    finishes: bool = False  # ends before phase 2
    expect: str = "placed"  # "placed" | "waits" | "unschedulable" (what the demo shows)
    gang: bool = field(default=False)


def _pod(
    name: str,
    job: str,
    *,
    gpus: int = 0,
    mig: str | None = None,
    cpu: str = "4",
    memory: str = "16Gi",
    product: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    priority: int = 0,
) -> dict[str, Any]:
    limits: dict[str, str] = {}
    if gpus:
        limits[podkeys.GPU_RESOURCE] = str(gpus)
    if mig:
        limits[podkeys.MIG_RESOURCE_PREFIX + mig] = "1"
    spec: dict[str, Any] = {
        "schedulerName": podkeys.SCHEDULER_NAME,
        "priority": priority,
        "containers": [
            {
                "name": "main",
                "image": "registry.example/ml:latest",
                "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits},
            }
        ],
    }
    if product:
        spec["nodeSelector"] = {PRODUCT: product}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": DEMO_NAMESPACE,
            "labels": {JOB_LABEL: job, **dict(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def _gang(
    job: str,
    size: int,
    gpus: int,
    *,
    product: str | None,
    priority: int = 0,
    kubenexus: bool = False,
) -> tuple[dict[str, Any], ...]:
    if kubenexus:  # the KubeNexus spelling of a pod group is accepted as is
        labels = {
            "pod-group.scheduling.kubenexus.io/name": job,
            "pod-group.scheduling.kubenexus.io/min-available": str(size),
        }
    else:
        labels = {podkeys.GANG.canonical: job, podkeys.GANG_MIN.canonical: str(size)}
    return tuple(
        _pod(
            f"{job}-{i}",
            job,
            gpus=gpus,
            cpu=str(8 * gpus),
            memory=f"{64 * gpus}Gi",
            product=product,
            labels=labels,
            priority=priority,
        )
        for i in range(size)
    )


def _shares() -> tuple[dict[str, Any], ...]:
    """Notebooks asking for part of one GPU (docs/sharing.md), each vocabulary once: Topos' own
    fraction, KAI's ``gpu-fraction`` as KAI users write it, and an amount of GPU memory (11Gi of
    an L40S's 45Gi: 0.245 of the GPU). Together they fill two GPUs."""
    asks = (
        {podkeys.GPU_FRACTION.canonical: "0.5"},
        {podkeys.GPU_FRACTION.canonical: "0.5"},
        {"gpu-fraction": "0.25"},
        {"gpu-fraction": "0.25"},
        {podkeys.GPU_MEMORY.canonical: "11Gi"},
        {podkeys.GPU_MEMORY.canonical: "11Gi"},
    )
    return tuple(
        _pod(f"notebook-share-{i}", "notebook-share", cpu="2", product=L40S, annotations=ask)
        for i, ask in enumerate(asks)
    )


def demo_workload() -> list[DemoJob]:
    numa = {
        podkeys.NUMA_POLICY.canonical: "single-numa",
        podkeys.NUMA_RESOURCES.canonical: f"cpu,memory,{podkeys.GPU_RESOURCE}",
    }
    jobs = [
        DemoJob(
            "llm-pretrain",
            "gang 8×8 GPU H100",
            _gang("llm-pretrain", 8, 8, product=H100, priority=100),
            gang=True,
            finishes=True,
        ),
        DemoJob(
            "finetune-7b",
            "gang 2×8 GPU H100",
            _gang("finetune-7b", 2, 8, product=H100, priority=100),
            gang=True,
        ),
        DemoJob(
            "a100-train",
            "gang 4×8 GPU A100 (KubeNexus labels)",
            _gang("a100-train", 4, 8, product=A100, kubenexus=True),
            gang=True,
        ),
        DemoJob("bert-ddp", "gang 4×2 GPU", _gang("bert-ddp", 4, 2, product=None), gang=True),
        DemoJob(
            "llm-pretrain-2",
            "gang 8×8 GPU H100",
            _gang("llm-pretrain-2", 8, 8, product=H100),
            gang=True,
            expect="waits",
        ),
        DemoJob(
            "cfd",
            "4× HPC, 2 GPU single-numa",
            tuple(
                _pod(f"cfd-{i}", "cfd", gpus=2, cpu="16", memory="64Gi", annotations=numa)
                for i in range(4)
            ),
        ),
        DemoJob(
            "render",
            "4× 2 GPU L40S",
            tuple(_pod(f"render-{i}", "render", gpus=2, product=L40S) for i in range(4)),
        ),
        DemoJob(
            "vision",
            "2× 4 GPU, NVLink only",
            tuple(
                _pod(
                    f"vision-{i}",
                    "vision",
                    gpus=4,
                    cpu="32",
                    memory="128Gi",
                    annotations={podkeys.GPU_LOCALITY.canonical: "nvlink"},
                )
                for i in range(2)
            ),
        ),
        DemoJob(
            "serve-1g",
            "6× MIG 1g.5gb inference",
            tuple(
                _pod(f"serve-1g-{i}", "serve-1g", mig="1g.5gb", cpu="2", priority=1000)
                for i in range(6)
            ),
        ),
        DemoJob(
            "embed-2g",
            "3× MIG 2g.10gb inference",
            tuple(
                _pod(f"embed-2g-{i}", "embed-2g", mig="2g.10gb", cpu="2", priority=1000)
                for i in range(3)
            ),
        ),
        DemoJob(
            "rerank-3g",
            "2× MIG 3g.20gb inference",
            tuple(
                _pod(f"rerank-3g-{i}", "rerank-3g", mig="3g.20gb", cpu="4", priority=1000)
                for i in range(2)
            ),
        ),
        DemoJob(
            "notebook-share",
            "6× part of one L40S GPU",
            _shares(),
        ),
        DemoJob(
            "notebook",
            "10× 1 GPU notebooks",
            tuple(_pod(f"notebook-{i}", "notebook", gpus=1) for i in range(10)),
            finishes=True,
        ),
        DemoJob(
            "oversized",
            "1 pod asking 16 GPUs",
            (_pod("oversized", "oversized", gpus=16),),
            expect="unschedulable",
        ),
    ]
    return jobs
