"""The workloads of ``benchmarks/kwok_workloads.py`` as their controllers' users write them — a
JobSet, a LeaderWorkerSet, a RayCluster — with the scheduler's name on every pod template, and
how a pod of theirs is told to its gang and slice from the labels the controllers write.

Slices asked for with Topos' keys on the pod templates (kube-scheduler reads none of them):

- JobSet: ``jobs`` child Jobs of 8 pods × 8 GPUs, one slice each (``topos.io/slice-size: 8``,
  ranks from the Job's completion index), each inside one leaf; the whole JobSet one gang;
- LeaderWorkerSet: groups of 4 pods × 8 GPUs (leader and 3 workers, every pod from
  ``workerTemplate``), each group one gang and one slice inside one NVLink domain
  (``nvidia.com/gpu.clique``);
- RayCluster: a head (1 CPU, no GPU) and one worker group of 8-GPU workers (``minReplicas`` =
  ``replicas``), one gang inside one leaf (``topos.io/gang-topology: leaf``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from common.kube import Resource
from common.podkeys import GPU_RESOURCE

JOBSETS: Final = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", True, "JobSet")
LEADER_WORKER_SETS: Final = Resource(
    "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", True, "LeaderWorkerSet"
)
RAY_CLUSTERS: Final = Resource("ray.io", "v1", "rayclusters", True, "RayCluster")

JOB_PODS: Final = 8
"""Pods (one node each) per JobSet child Job: one slice."""
LWS_SIZE: Final = 4
CLIQUE: Final = "nvidia.com/gpu.clique"

_JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
_LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
_LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
_RAY_CLUSTER = "ray.io/cluster"


def _container(name: str, gpus: int) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "4Gi"}}
    if gpus:
        resources["limits"] = {GPU_RESOURCE: str(gpus)}
    return {"name": name, "image": "registry.example/train:1", "resources": resources}


def _template(
    scheduler: str, container: dict[str, Any], annotations: dict[str, str], **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"annotations": dict(annotations)},
        "spec": {"schedulerName": scheduler, "containers": [container], **spec},
    }


def jobset(name: str, scheduler: str, jobs: int) -> dict[str, Any]:
    """``jobs`` Jobs of ``JOB_PODS`` 8-GPU pods (JobSet's simple example, sized up)."""
    slices = {"topos.io/slice-size": str(JOB_PODS), "topos.io/slice-topology": "leaf"}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": jobs,
                    "template": {
                        "spec": {
                            "parallelism": JOB_PODS,
                            "completions": JOB_PODS,
                            "backoffLimit": 0,
                            "template": _template(
                                scheduler,
                                _container("trainer", 8),
                                slices,
                                restartPolicy="Never",
                            ),
                        }
                    },
                }
            ]
        },
    }


def leader_worker_set(name: str, scheduler: str, groups: int) -> dict[str, Any]:
    """``groups`` groups of ``LWS_SIZE`` 8-GPU pods (LWS's sample, sized up)."""
    slices = {"topos.io/slice-size": str(LWS_SIZE), "topos.io/slice-topology": CLIQUE}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": groups,
            "leaderWorkerTemplate": {
                "size": LWS_SIZE,
                "workerTemplate": _template(scheduler, _container("vllm", 8), slices),
            },
        },
    }


def ray_cluster(name: str, scheduler: str, workers: int) -> dict[str, Any]:
    """A head and ``workers`` 8-GPU workers (KubeRay's sample, sized up)."""
    inside = {"topos.io/gang-topology": "leaf"}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {
            "rayVersion": "2.46.0",
            "headGroupSpec": {
                "rayStartParams": {},
                "template": _template(scheduler, _container("ray-head", 0), inside),
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": workers,
                    "rayStartParams": {},
                    "template": _template(scheduler, _container("ray-worker", 8), inside),
                }
            ],
        },
    }


@dataclass(frozen=True, slots=True)
class Membership:
    """Which workload, gang and slice a pod is in."""

    workload: str
    gang: str
    slice: str


def membership(labels: dict[str, str]) -> Membership | None:
    """From the labels the controllers write on their pods; ``None`` for any other pod."""
    if _JOBSET_NAME in labels:
        gang = f"jobset/{labels[_JOBSET_NAME]}"
        return Membership("jobset", gang, f"{gang}/job-{labels.get(_JOB_INDEX, '?')}")
    if _LWS_NAME in labels:
        gang = f"lws/{labels[_LWS_NAME]}/{labels.get(_LWS_GROUP, '?')}"
        return Membership("lws", gang, gang)
    if _RAY_CLUSTER in labels:
        gang = f"ray/{labels[_RAY_CLUSTER]}"
        return Membership("ray", gang, gang)
    return None
