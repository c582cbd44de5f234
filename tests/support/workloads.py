"""Workload objects (Jobs, Deployments, StatefulSets) applied on the real test control plane,
where kube-controller-manager's Job and ReplicaSet controllers make their pods."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import yaml

from common.kube import AlreadyExists, Resource
from devcluster.kube_wait import wait_for_pods
from tests.support.gpu_cluster import PRIORITY_CLASSES, GpuCluster

JOBS = Resource("batch", "v1", "jobs", namespaced=True, kind="Job")
DEPLOYMENTS = Resource("apps", "v1", "deployments", namespaced=True, kind="Deployment")
STATEFULSETS = Resource("apps", "v1", "statefulsets", namespaced=True, kind="StatefulSet")
BY_KIND = {"Job": JOBS, "Deployment": DEPLOYMENTS, "StatefulSet": STATEFULSETS}


def gpu_job(
    name: str,
    annotations: Mapping[str, str],
    gpus: int,
    *,
    parallelism: int = 1,
    completions: bool = True,
    labels: Mapping[str, str] | None = None,
) -> str:
    """A Job of ``parallelism`` pods of ``gpus`` GPUs each (scheduler ``topos``), as YAML.
    ``completions``: as many as ``parallelism``; off, none — each pod runs until it is done and
    the parallelism may be changed. ``labels``: on the pod template."""
    spec: dict[str, Any] = {"parallelism": parallelism}
    if completions:
        spec["completions"] = parallelism
    container = {
        "name": "work",
        "image": "trainer:1",
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }
    template: dict[str, Any] = {
        "spec": {"schedulerName": "topos", "restartPolicy": "Never", "containers": [container]}
    }
    if labels:
        template["metadata"] = {"labels": dict(labels)}
    spec["template"] = template
    metadata = {"name": name, "annotations": dict(annotations)}
    return yaml.safe_dump(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}
    )


async def apply(cluster: GpuCluster, manifest: str | Mapping[str, Any]) -> dict[str, Any]:
    """Create one object from YAML (or a dict) in the test's namespace: a workload, or what
    :meth:`GpuCluster.create` takes (Pods, PriorityClasses). A PriorityClass another test made
    with the same name is left as it is (``kubectl apply`` of the same class)."""
    obj = dict(yaml.safe_load(manifest) if isinstance(manifest, str) else manifest)
    resource = BY_KIND.get(obj.get("kind", ""))
    if resource is not None:
        return await cluster.kube.create(resource, obj, namespace=cluster.namespace)
    if obj.get("kind") == "PriorityClass":
        with contextlib.suppress(AlreadyExists):
            return await cluster.create(obj)
        return await cluster.kube.get(PRIORITY_CLASSES, obj["metadata"]["name"])
    return await cluster.create(obj)


async def apply_all(cluster: GpuCluster, manifests: str) -> list[dict[str, Any]]:
    return [await apply(cluster, doc) for doc in yaml.safe_load_all(manifests) if doc]


async def scale(cluster: GpuCluster, name: str, replicas: int) -> None:
    """``kubectl scale deployment <name> --replicas=<replicas>``."""
    await cluster.kube.patch(
        DEPLOYMENTS, name, {"spec": {"replicas": replicas}}, namespace=cluster.namespace
    )


async def pods_of(cluster: GpuCluster, selector: str, count: int) -> list[dict[str, Any]]:
    """The ``count`` live pods matching ``selector``, once the controller has made them all."""

    def made(pods: Any) -> list[dict[str, Any]] | None:
        live = [dict(p) for p in pods if not p["metadata"].get("deletionTimestamp")]
        return live if len(live) == count else None

    return await wait_for_pods(
        cluster.kube,
        cluster.namespace,
        made,
        label_selector=selector,
        what=f"{count} pods matching {selector}",
    )
