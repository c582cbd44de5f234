"""DRA on the test control plane: nodes whose GPUs are NVIDIA DRA devices, claims, and reading
back what a scheduler allocated.

- :func:`dra_node` — a Ready Node from a hardware profile without device-plugin resources, the
  DeviceClasses and its ResourceSlice exactly as NVIDIA's DRA driver publishes them
  (``devcluster.dra``; device ``gpu-<i>`` carries the UUID the node's agent reports for GPU
  ``i``). ``GpuCluster.add_node(..., dra=True)`` does the same for a Topos cluster.
- :func:`claim_template`, :func:`claim`, :func:`claim_pod` — the objects a user writes.
- :func:`pod_claim` — the claim behind a pod's claim entry (created by the controller-manager
  from a template, or by a scheduler for an extended-resource pod), once ``check`` holds for it;
  :func:`devices` — the devices allocated in it.

The ``kube_scheduler_name`` fixture (tests/conftest.py) is a real kube-scheduler; pods naming it
in ``schedulerName`` get their claims allocated, reserved and bound by Kubernetes itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agent.devices import discover_profile
from common.kube import NODES, PODS, KubeClient, Resource
from devcluster.dra import GPU_CLASS, publish_classes, publish_node
from devcluster.nodes import SimNode, register
from tests.support.kube_wait import wait_for, wait_for_object

RESOURCE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", True, "ResourceClaim")
RESOURCE_CLAIM_TEMPLATES = Resource(
    "resource.k8s.io", "v1", "resourceclaimtemplates", True, "ResourceClaimTemplate"
)
EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"


async def dra_node(
    kube: KubeClient, name: str, profile: str, *, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A Ready, untainted Node ``name`` of ``profile`` whose GPUs are DRA devices only; returns
    its ResourceSlice as the API server stored it."""
    topology = discover_profile(profile, hostname=name)
    sim = SimNode(name=name, profile=profile, leaf="leaf-0", spine="spine-0", topology=topology)
    await register(kube, [sim], device_plugin=False)
    if labels:
        await kube.patch(NODES, name, {"metadata": {"labels": dict(labels)}})
    await publish_classes(kube)
    return await publish_node(kube, name, profile)


def _requests(gpus: int, device_class: str) -> list[dict[str, Any]]:
    exactly = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": gpus}
    return [{"name": "gpus", "exactly": exactly}]


def claim_template(name: str, gpus: int, *, device_class: str = GPU_CLASS) -> dict[str, Any]:
    """A ResourceClaimTemplate for ``gpus`` devices of ``device_class`` (request ``gpus``)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": _requests(gpus, device_class)}}},
    }


def claim(name: str, gpus: int, *, device_class: str = GPU_CLASS) -> dict[str, Any]:
    """A ResourceClaim for ``gpus`` devices of ``device_class`` (request ``gpus``)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": _requests(gpus, device_class)}},
    }


def claim_pod(
    name: str,
    *,
    template: str | None = None,
    claim_name: str | None = None,
    gpus: int | None = None,
    scheduler: str | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod whose container uses the claim ``gpus`` (from ``template`` or the existing
    ``claim_name``), or, with ``gpus``, one that asks ``nvidia.com/gpu`` like any pod."""
    container: dict[str, Any] = {"name": "main", "image": "cuda"}
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if template is not None or claim_name is not None:
        source = (
            {"resourceClaimTemplateName": template}
            if template is not None
            else {"resourceClaimName": claim_name}
        )
        spec["resourceClaims"] = [{"name": "gpus", **source}]
        container["resources"] = {"claims": [{"name": "gpus"}]}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def pod_claim(
    kube: KubeClient,
    namespace: str,
    pod: str,
    check: Callable[[dict[str, Any]], bool],
    *,
    what: str,
) -> dict[str, Any]:
    """The claim behind pod ``pod``'s claim (its ``resourceClaimStatuses``, else its
    ``extendedResourceClaimStatus``), once ``check(claim)`` holds."""
    obj = await wait_for_object(
        kube,
        PODS,
        pod,
        lambda p: _claim_name(p) is not None,
        namespace=namespace,
        what=f"a claim named in pod {pod}'s status",
    )
    name = _claim_name(obj)
    return await wait_for_object(
        kube, RESOURCE_CLAIMS, str(name), check, namespace=namespace, what=what
    )


def _claim_name(pod: Mapping[str, Any]) -> str | None:
    status = pod.get("status") or {}
    for entry in status.get("resourceClaimStatuses") or ():
        if entry.get("resourceClaimName"):
            return str(entry["resourceClaimName"])
    extended = status.get("extendedResourceClaimStatus") or {}
    return str(extended["resourceClaimName"]) if extended.get("resourceClaimName") else None


def allocated(claim: Mapping[str, Any]) -> bool:
    return bool(((claim.get("status") or {}).get("allocation") or {}).get("devices"))


def devices(claim: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of every device allocated in ``claim``, sorted."""
    results = claim["status"]["allocation"]["devices"]["results"]
    return sorted((r["driver"], r["pool"], r["device"]) for r in results)


def reserved_for(claim: Mapping[str, Any]) -> list[str]:
    """Names of the consumers the claim is reserved for."""
    return sorted(r["name"] for r in (claim.get("status") or {}).get("reservedFor") or ())


async def claim_gone(kube: KubeClient, namespace: str, name: str) -> None:
    """Wait until the claim ``name`` no longer exists."""
    await wait_for(
        kube,
        RESOURCE_CLAIMS,
        lambda claims: True if not claims else None,
        namespace=namespace,
        name=name,
        what=f"claim {name} deleted",
    )
