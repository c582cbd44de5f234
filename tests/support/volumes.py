"""PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes and VolumeAttachments as
the API server returns them, for the volume tests: a claim (bound or not), a local PV on one
node, a CSI volume, a StorageClass, a node's CSINode, a VolumeAttachment."""

from __future__ import annotations

from typing import Any

ZONE = "topology.kubernetes.io/zone"
EBS = "ebs.csi.aws.com"


def claim(
    name: str,
    *,
    size: str = "10Gi",
    cls: str | None = "local",
    volume: str = "",
    bound: bool = False,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    **meta: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": list(modes),
        "resources": {"requests": {"storage": size}},
    }
    if cls is not None:
        spec["storageClassName"] = cls
    if volume:
        spec["volumeName"] = volume
    annotations = {"pv.kubernetes.io/bind-completed": "yes"} if bound else {}
    return {
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "annotations": annotations,
            **meta,
        },
        "spec": spec,
        "status": {"phase": "Bound" if bound else "Pending"},
    }


def local_pv(
    name: str,
    node: str | None,
    *,
    size: str = "100Gi",
    cls: str = "local",
    claim_ref: tuple[str, str] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """``claim_ref``: (claim name, uid), the claim in ``namespace``; uid "": pre-bound by name."""
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": cls,
        "local": {"path": "/mnt/nvme0"},
    }
    if node is not None:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                        ]
                    }
                ]
            }
        }
    if claim_ref is not None:
        spec["claimRef"] = {"namespace": namespace, "name": claim_ref[0], "uid": claim_ref[1]}
    return {
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"phase": "Bound" if claim_ref else "Available"},
    }


def storage_class(
    name: str,
    *,
    mode: str = "WaitForFirstConsumer",
    provisioner: str = "kubernetes.io/no-provisioner",
    zones: tuple[str, ...] = (),
    topology_key: str = ZONE,
) -> dict[str, Any]:
    """``zones``: the ``allowedTopologies`` values of ``topology_key`` (none: anywhere)."""
    obj: dict[str, Any] = {
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
    }
    if zones:
        obj["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": topology_key, "values": list(zones)}]}
        ]
    return obj


def pv(name: str, source: dict[str, Any]) -> dict[str, Any]:
    """A bound PV of ``source`` (``{"csi": …}``, ``{"awsElasticBlockStore": …}``)."""
    return {
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "100Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local",
            **source,
        },
        "status": {"phase": "Bound"},
    }


def csi_volume(name: str, handle: str = "", driver: str = EBS) -> list[dict[str, Any]]:
    """Claim ``name`` bound to PV ``pv-<name>`` of ``driver`` (handle: the name unless given)."""
    return [
        claim(name, volume=f"pv-{name}", bound=True),
        pv(f"pv-{name}", {"csi": {"driver": driver, "volumeHandle": handle or name}}),
    ]


def csi_node(node: str, **counts: int | None) -> dict[str, Any]:
    """The CSINode of ``node``: each driver by name (``ebs``: :data:`EBS`) with its count
    (``None``: no count)."""
    drivers = []
    for key, count in counts.items():
        entry: dict[str, Any] = {"name": EBS if key == "ebs" else key, "nodeID": node}
        if count is not None:
            entry["allocatable"] = {"count": count}
        drivers.append(entry)
    return {"kind": "CSINode", "metadata": {"name": node}, "spec": {"drivers": drivers}}


def attachment(name: str, node: str, volume: str, attacher: str = EBS) -> dict[str, Any]:
    """A VolumeAttachment of PV ``volume`` to ``node`` by ``attacher`` (``volume`` "": an
    inline volume's, no PV named)."""
    source = {"persistentVolumeName": volume} if volume else {"inlineVolumeSpec": {}}
    return {
        "kind": "VolumeAttachment",
        "metadata": {"name": name},
        "spec": {"attacher": attacher, "nodeName": node, "source": source},
        "status": {"attached": True},
    }
