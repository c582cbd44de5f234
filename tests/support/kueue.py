"""Kueue as users set it up, for the tests on the real control plane with the real Kueue
(``kueue_controller``): a ResourceFlavor, two ClusterQueues in one cohort (each lending to the
other), a LocalQueue each in the test's namespace, WorkloadPriorityClasses, and Jobs / JobSets
that name a queue and whose pods say ``schedulerName: topos``.

Cluster-scoped objects carry the test's namespace in their names (the workloads' control plane
is shared by the session) and are deleted when the test ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from common.kube import KubeClient, NotFound, Resource
from devcluster.kube_wait import wait_for, wait_for_object

GROUP: Final = "kueue.x-k8s.io"
VERSION: Final = "v1beta2"  # the storage version of Kueue v0.17 (v1beta1 converts on loopback)
RESOURCE_FLAVORS = Resource(GROUP, VERSION, "resourceflavors", False, "ResourceFlavor")
CLUSTER_QUEUES = Resource(GROUP, VERSION, "clusterqueues", False, "ClusterQueue")
LOCAL_QUEUES = Resource(GROUP, VERSION, "localqueues", True, "LocalQueue")
WORKLOADS = Resource(GROUP, VERSION, "workloads", True, "Workload")
ADMISSION_CHECKS = Resource(GROUP, VERSION, "admissionchecks", False, "AdmissionCheck")
PRIORITY_CLASSES = Resource(
    GROUP, VERSION, "workloadpriorityclasses", False, "WorkloadPriorityClass"
)
TOPOLOGIES = Resource(GROUP, VERSION, "topologies", False, "Topology")
JOBS = Resource("batch", "v1", "jobs", True, "Job")

QUEUE_NAME: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS: Final = "kueue.x-k8s.io/priority-class"
GPU: Final = "nvidia.com/gpu"


@dataclass(frozen=True)
class Queues:
    """What :func:`queues` made: ClusterQueue names by team, the flavor, the priority classes."""

    cluster_queues: Mapping[str, str]
    flavor: str
    low: str
    high: str


@contextlib.asynccontextmanager
async def queues(
    kube: KubeClient,
    namespace: str,
    *,
    teams: Sequence[str] = ("team-a", "team-b"),
    gpus_each: int = 8,
    admission_checks: Sequence[str] = (),
    topology: Sequence[str] = (),
    node_labels: Mapping[str, str] | None = None,
    gpus: Mapping[str, int] | None = None,
    weights: Mapping[str, str] | None = None,
) -> AsyncIterator[Queues]:
    """A ResourceFlavor, a ClusterQueue per team (``gpus_each`` GPUs nominal, borrowing from the
    cohort without limit, reclaiming lent quota from any priority, preempting lower priority
    within itself; ``admission_checks`` asked of every workload), a LocalQueue per team in
    ``namespace`` named after it, and WorkloadPriorityClasses ``low`` (0) and ``high`` (1000).
    ``topology``: node labels, top level first, of a Kueue ``Topology`` the flavor names (a TAS
    flavor: Kueue picks the domain); ``node_labels``: the flavor's nodes. ``gpus``: a team's
    nominal GPUs instead of ``gpus_each``; ``weights``: a team's fair-sharing weight
    (``spec.fairSharing.weight``; Kueue's fair sharing is on in the harness)."""
    flavor = f"{namespace}-gpu"
    made: list[tuple[Resource, str]] = []

    async def put(resource: Resource, body: dict[str, Any]) -> None:
        await kube.create(resource, body, namespace=namespace if resource.namespaced else None)
        if not resource.namespaced:
            made.append((resource, body["metadata"]["name"]))

    try:
        flavor_spec: dict[str, Any] = {}
        if node_labels:
            flavor_spec["nodeLabels"] = dict(node_labels)
        if topology:
            await put(
                TOPOLOGIES,
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "Topology",
                    "metadata": {"name": flavor},
                    "spec": {"levels": [{"nodeLabel": label} for label in topology]},
                },
            )
            flavor_spec["topologyName"] = flavor
        await put(
            RESOURCE_FLAVORS,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
                "spec": flavor_spec,
            },
        )
        classes = {}
        for level, value in (("low", 0), ("high", 1000)):
            classes[level] = f"{namespace}-{level}"
            await put(
                PRIORITY_CLASSES,
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "WorkloadPriorityClass",
                    "metadata": {"name": classes[level]},
                    "value": value,
                },
            )
        names = {}
        for team in teams:
            names[team] = f"{namespace}-{team}"
            nominal = (gpus or {}).get(team, gpus_each)
            spec: dict[str, Any] = {
                "cohortName": namespace,
                "namespaceSelector": {},
                "preemption": {
                    "reclaimWithinCohort": "Any",
                    "withinClusterQueue": "LowerPriority",
                },
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", GPU],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": str(16 * nominal)},
                                    {"name": "memory", "nominalQuota": f"{128 * nominal}Gi"},
                                    {"name": GPU, "nominalQuota": str(nominal)},
                                ],
                            }
                        ],
                    }
                ],
            }
            if weights and team in weights:
                spec["fairSharing"] = {"weight": weights[team]}
            if admission_checks:
                spec["admissionChecksStrategy"] = {
                    "admissionChecks": [{"name": check} for check in admission_checks]
                }
            await put(
                CLUSTER_QUEUES,
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ClusterQueue",
                    "metadata": {"name": names[team]},
                    "spec": spec,
                },
            )
            await put(
                LOCAL_QUEUES,
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "LocalQueue",
                    "metadata": {"name": team},
                    "spec": {"clusterQueue": names[team]},
                },
            )
        for name in names.values():
            await wait_for_object(
                kube, CLUSTER_QUEUES, name, _active, what=f"ClusterQueue {name} Active"
            )
        yield Queues(names, flavor, classes["low"], classes["high"])
    finally:
        for resource, name in reversed(made):
            with contextlib.suppress(NotFound):
                await kube.delete(resource, name)


def _active(obj: Mapping[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)


def pod_template(gpus: int, *, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A training worker asking ``gpus`` GPUs (and CPU and memory in proportion), placed by
    Topos."""
    per = max(gpus, 1)
    return {
        "metadata": {"labels": dict(labels or {})},
        "spec": {
            "schedulerName": "topos",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "train",
                    "image": "trainer",
                    "resources": {
                        "requests": {
                            "cpu": str(8 * per),
                            "memory": f"{64 * per}Gi",
                            GPU: str(gpus),
                        },
                        "limits": {GPU: str(gpus)},
                    },
                }
            ],
        },
    }


def job(
    name: str, queue: str, *, pods: int, gpus: int, priority_class: str | None = None
) -> dict[str, Any]:
    """A batch/v1 Job of ``pods`` pods × ``gpus`` GPUs in LocalQueue ``queue`` (Kueue's
    webhook creates it suspended)."""
    labels = {QUEUE_NAME: queue}
    if priority_class:
        labels[PRIORITY_CLASS] = priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": pod_template(gpus),
        },
    }


def jobset(name: str, queue: str, *, replicas: int, pods: int, gpus: int) -> dict[str, Any]:
    """A JobSet of one replicated job (``replicas`` Jobs of ``pods`` pods × ``gpus`` GPUs) in
    LocalQueue ``queue``."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {QUEUE_NAME: queue}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": pods,
                            "completions": pods,
                            "backoffLimit": 0,
                            "template": pod_template(gpus),
                        }
                    },
                }
            ]
        },
    }


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def is_true(obj: Mapping[str, Any], kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


async def workload_of(
    kube: KubeClient, namespace: str, owner_uid: str, *, admitted: bool | None = None
) -> dict[str, Any]:
    """The Workload Kueue made for the object ``owner_uid`` (once ``Admitted`` is ``admitted``,
    when given)."""

    def found(items: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
        for item in items:
            owners = item["metadata"].get("ownerReferences") or []
            ours = any(o.get("uid") == owner_uid for o in owners)
            if ours and (admitted is None or is_true(item, "Admitted") == admitted):
                return dict(item)
        return None

    state = "" if admitted is None else (" admitted" if admitted else " not admitted")
    return await wait_for(
        kube, WORKLOADS, found, namespace=namespace, what=f"the Workload of {owner_uid}{state}"
    )
