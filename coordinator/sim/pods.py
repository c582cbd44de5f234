"""Trace jobs as the Pod objects a user would submit, parsed by the scheduling core's own
``parse_pod`` (so every policy sees exactly what the real scheduler would)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from common import labels as L
from common import podkeys
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from coordinator.sim.trace import Job

__all__ = ["NAMESPACE", "gpu_type_values", "job_manifests", "job_pods"]

NAMESPACE = "sim"


def gpu_type_values(gpu_type: str, products: Iterable[str]) -> list[str]:
    """The ``topos.io/gpu.product`` label values a trace's GPU type names: every product whose
    name contains the type (case-insensitive, ``H100`` → ``NVIDIA-H100-80GB-HBM3``). When none
    does, the type itself (so the pod matches no node and is reported unplaceable)."""
    want = L.sanitise_label_value(gpu_type).lower()
    found = sorted({p for p in products if want and want in p.lower()})
    return found or [L.sanitise_label_value(gpu_type) or "none"]


def job_manifests(job: Job, products: Iterable[str] = ()) -> list[dict[str, Any]]:
    """One Pod manifest per gang member (``<job>-<i>``; a single pod is ``<job>``)."""
    limits: dict[str, str] = {}
    if job.mig_profile:
        limits[podkeys.MIG_RESOURCE_PREFIX + job.mig_profile] = str(job.gpus)
    elif job.gpus and job.gpu_fraction is None:
        limits[podkeys.GPU_RESOURCE] = str(job.gpus)
    requests = {
        "cpu": f"{round(job.cpu_per_pod * 1000)}m",
        "memory": f"{round(job.memory_gib_per_pod * 1024)}Mi",
    }
    labels: dict[str, str] = {"sim.topos.io/job": job.job_id}
    annotations: dict[str, str] = {}
    if job.gang_size > 1:
        labels[podkeys.GANG.canonical] = job.job_id
        labels[podkeys.GANG_MIN.canonical] = str(job.gang_size)
    if job.numa_policy:
        annotations[podkeys.NUMA_POLICY.canonical] = job.numa_policy
    if job.gpu_fraction is not None:  # a share of one GPU, no nvidia.com/gpu (docs/sharing.md)
        annotations[podkeys.GPU_FRACTION.canonical] = f"{job.gpu_fraction:g}"
    spec: dict[str, Any] = {
        "schedulerName": podkeys.SCHEDULER_NAME,
        "priority": job.priority,
        "containers": [
            {"name": "main", "image": "sim", "resources": {"limits": limits, "requests": requests}}
        ],
    }
    if job.gpu_type:
        values = gpu_type_values(job.gpu_type, products)
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": L.GPU_PRODUCT, "operator": "In", "values": values}
                            ]
                        }
                    ]
                }
            }
        }
    out = []
    for i in range(job.gang_size):
        name = job.job_id if job.gang_size == 1 else f"{job.job_id}-{i}"
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "uid": f"sim-{name}",
                    "labels": dict(labels),
                    "annotations": dict(annotations),
                },
                "spec": spec,
            }
        )
    return out


def job_pods(job: Job, products: Iterable[str] = ()) -> Sequence[PodRequest]:
    """The job's pods as the core's ``PodRequest``s. Raises ``ValueError`` for a job the core
    rejects outright (which a validated trace does not produce)."""
    out: list[PodRequest] = []
    for manifest in job_manifests(job, products):
        pod = parse_pod(manifest)
        if isinstance(pod, PodSpecError):
            raise ValueError(f"job {job.job_id}: {pod.text}")
        out.append(pod)
    return out
