"""PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes and VolumeAttachments:
watched into the view's :class:`~coordinator.core.snapshot.volumes.Volumes` (what VolumeBinding
and NodeVolumeLimits read), and the writes that bind a pod's WaitForFirstConsumer volumes to its
node before its Binding (:func:`bind_volumes`, kube-scheduler's VolumeBinding PreBind).

Claims are watched in the namespace the coordinator serves (or all), the others cluster-wide.
VolumeAttachments are watched whatever the profiles say, as CSINodes are: a profile reloaded
at run time may turn NodeVolumeLimits on.
"""

from __future__ import annotations

from typing import Any, Final

from common.kube import (
    Conflict,
    Invalid,
    KubeClient,
    KubeError,
    KubeObject,
    NotFound,
    Resource,
    Unreachable,
)
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.core.snapshot.volumes import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    VolumeKind,
    Volumes,
    VolumeWrites,
)
from coordinator.engine.ports import BindConflict, ClusterError, NoAnswer, PodRef

__all__ = [
    "CSI_NODES",
    "PERSISTENT_VOLUMES",
    "PERSISTENT_VOLUME_CLAIMS",
    "STORAGE_CLASSES",
    "VOLUME_ATTACHMENTS",
    "bind_volumes",
    "volume_watches",
]

PERSISTENT_VOLUME_CLAIMS: Final = Resource(
    "", "v1", "persistentvolumeclaims", namespaced=True, kind="PersistentVolumeClaim"
)
PERSISTENT_VOLUMES: Final = Resource(
    "", "v1", "persistentvolumes", namespaced=False, kind="PersistentVolume"
)
STORAGE_CLASSES: Final = Resource(
    "storage.k8s.io", "v1", "storageclasses", namespaced=False, kind="StorageClass"
)

CSI_NODES: Final = Resource("storage.k8s.io", "v1", "csinodes", namespaced=False, kind="CSINode")
VOLUME_ATTACHMENTS: Final = Resource(
    "storage.k8s.io", "v1", "volumeattachments", namespaced=False, kind="VolumeAttachment"
)


class _Feed:
    """A reflector's handler: one kind into ``volumes``."""

    def __init__(self, volumes: Volumes, kind: VolumeKind) -> None:
        self._volumes = volumes
        self._kind = kind

    def replace(self, items: list[KubeObject]) -> None:
        self._volumes.clear(self._kind)
        for obj in items:
            self._volumes.put(self._kind, obj)
        self._volumes.on_change(self._kind, "")  # those gone meanwhile: any of the kind

    def apply(self, kind: Change, obj: KubeObject) -> None:
        if kind != "DELETED":
            self._volumes.put(self._kind, obj)
            return
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if self._kind == "PersistentVolumeClaim":
            name = f"{meta.get('namespace') or 'default'}/{name}"
        self._volumes.remove(self._kind, name)


def volume_watches(
    client: KubeClient, volumes: Volumes, *, namespace: str | None
) -> list[Reflector]:
    """Reflectors for claims (in ``namespace``, or all), PVs, StorageClasses, CSINodes and
    VolumeAttachments (run them, wait for ``synced``)."""
    kinds: tuple[tuple[Resource, VolumeKind, str | None, str], ...] = (
        (PERSISTENT_VOLUME_CLAIMS, "PersistentVolumeClaim", namespace, "persistent volume claims"),
        (PERSISTENT_VOLUMES, "PersistentVolume", None, "persistent volumes"),
        (STORAGE_CLASSES, "StorageClass", None, "storage classes"),
        (CSI_NODES, "CSINode", None, "CSI nodes"),
        (VOLUME_ATTACHMENTS, "VolumeAttachment", None, "volume attachments"),
    )
    return [
        Reflector(client, resource, _Feed(volumes, kind), namespace=ns, what=what)
        for resource, kind, ns, what in kinds
    ]


async def bind_volumes(client: KubeClient, pod: PodRef, writes: VolumeWrites) -> None:
    """Each PV matched gets ``spec.claimRef`` and ``pv.kubernetes.io/bound-by-controller``, as
    kube-scheduler's binder writes them (its ``resourceVersion`` as precondition), then each
    claim to provision gets ``volume.kubernetes.io/selected-node``. A PV taken or a claim gone
    meanwhile is a :class:`BindConflict` (the pod is decided again)."""
    try:
        for pv, claim in writes.bind:
            patch: dict[str, Any] = {
                "metadata": {
                    "resourceVersion": pv.resource_version,
                    "annotations": {ANN_BOUND_BY_CONTROLLER: "yes"},
                },
                "spec": {
                    "claimRef": {
                        "kind": "PersistentVolumeClaim",
                        "apiVersion": "v1",
                        "namespace": claim.namespace,
                        "name": claim.name,
                        "uid": claim.uid,
                        "resourceVersion": claim.resource_version,
                    }
                },
            }
            await client.patch(PERSISTENT_VOLUMES, pv.name, patch)
        for claim in writes.provision:
            if claim.selected_node == writes.node:
                continue
            await client.patch(
                PERSISTENT_VOLUME_CLAIMS,
                claim.name,
                {"metadata": {"annotations": {ANN_SELECTED_NODE: writes.node}}},
                namespace=claim.namespace,
            )
    except (NotFound, Conflict, Invalid) as exc:
        raise BindConflict(f"bind the volumes of {pod.key} to {writes.node}: {exc}") from exc
    except Unreachable as exc:
        raise NoAnswer(f"bind the volumes of {pod.key} to {writes.node}: {exc}") from exc
    except KubeError as exc:
        raise ClusterError(f"bind the volumes of {pod.key} to {writes.node}: {exc}") from exc
