"""In-tree volume sources (``awsElasticBlockStore``, ``gcePersistentDisk``, ``cinder``,
``azureDisk``, ``azureFile``, ``vsphereVolume``, ``portworxVolume``) as k8s.io/csi-translation-lib
v0.36 translates them to a CSI driver and volume handle, the way kube-scheduler's
NodeVolumeLimits counts them: in a PV (:func:`translate_pv`) or written in the pod
(:func:`inline_volumes`).

kube-scheduler counts a translated volume only where the plugin's migration is on
(``isCSIMigrationOn``: AWS EBS, GCE PD, Cinder, Azure Disk and Portworx, on a node with a
CSINode; :data:`MIGRATED_DRIVERS`); Azure File and vSphere volumes are translated only to name
their driver (a VolumeAttachment of that driver deleted wakes the pod) and never counted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from coordinator.core.podspec.fields import FieldError, entry, mapping, sequence, text

__all__ = [
    "MIGRATED_DRIVERS",
    "InlineVolume",
    "bound_inline_volumes",
    "inline_source",
    "inline_volumes",
    "translate_pv",
]

#: ``spec.<field>`` of each in-tree source: (in-tree plugin, the CSI driver it migrates to).
_SOURCES: Final[Mapping[str, tuple[str, str]]] = {
    "awsElasticBlockStore": ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    "gcePersistentDisk": ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    "cinder": ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    "azureDisk": ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    "azureFile": ("kubernetes.io/azure-file", "file.csi.azure.com"),
    "vsphereVolume": ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
    "portworxVolume": ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
}
#: The in-tree plugins kube-scheduler's NodeVolumeLimits counts as migrated to their CSI driver
#: (``isCSIMigrationOn``), by plugin name (a StorageClass's provisioner).
MIGRATED_DRIVERS: Final[Mapping[str, str]] = {
    plugin: driver
    for field, (plugin, driver) in _SOURCES.items()
    if field not in ("azureFile", "vsphereVolume")
}
_AWS_VOLUME_ID: Final = re.compile(r"^vol-[^/]*$")
_UNSPECIFIED: Final = "UNSPECIFIED"
_ZONE_LABELS: Final = ("failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone")


class TranslationError(Exception):
    """csi-translation-lib refuses the source; the message is its own."""


def _ebs_volume_id(kubernetes_id: str) -> str:
    """``KubernetesVolumeIDToEBSVolumeID``: ``aws://<zone>/vol-…`` or a bare ID."""
    if not kubernetes_id.startswith("aws://"):
        return kubernetes_id
    try:
        path = urlsplit(kubernetes_id).path
    except ValueError as exc:
        raise TranslationError(f"Invalid disk name ({kubernetes_id}): {exc}") from None
    volume_id = path.strip("/")
    if not _AWS_VOLUME_ID.match(volume_id):
        raise TranslationError(f"Invalid format for AWS volume ({kubernetes_id})")
    return volume_id


def _gce_handle(pd_name: str, labels: Mapping[str, str]) -> str:
    """The GCE PD translator's handle for a PV: zonal, regional or unspecified by its zone
    label (``a__b`` lists a regional disk's zones)."""
    zones = (labels.get(_ZONE_LABELS[0]) or labels.get(_ZONE_LABELS[1]) or "").split("__")
    if len(zones) == 1 and zones[0]:
        return f"projects/{_UNSPECIFIED}/zones/{zones[0]}/disks/{pd_name}"
    if len(zones) > 1:
        regions = set()
        for zone in zones:
            parts = zone.split("-")
            if len(parts) != 3:
                raise TranslationError(f"zone in unexpected format: {zone}")
            regions.add("-".join(parts[:2]))
        if len(regions) != 1:
            raise TranslationError(f"multiple regions gotten from zones: {sorted(regions)}")
        return f"projects/{_UNSPECIFIED}/regions/{regions.pop()}/disks/{pd_name}"
    return f"projects/{_UNSPECIFIED}/zones/{_UNSPECIFIED}/disks/{pd_name}"


def _handle(field: str, source: Mapping[str, object], path: str, labels: Mapping[str, str]) -> str:
    """The volume handle of a counted in-tree ``source`` (``spec.<field>``); ``labels``: the
    PV's (``{}`` for an inline volume, whose GCE PD zone is unspecified)."""
    if field == "awsElasticBlockStore":
        try:
            return _ebs_volume_id(text(source, "volumeID", path))
        except TranslationError as bad:
            raise TranslationError(
                f"failed to translate Kubernetes ID to EBS Volume ID {bad}"
            ) from None
    if field == "gcePersistentDisk":
        return _gce_handle(text(source, "pdName", path), labels)
    if field == "azureDisk":
        kind = source.get("kind")
        if kind is not None and str(kind).lower() != "managed":
            raise TranslationError(f"kind({kind}) is not supported in csi migration")
        return text(source, "diskURI", path)
    return text(source, "volumeID", path)  # cinder, portworxVolume


def translate_pv(spec: Mapping[str, object], labels: Mapping[str, str]) -> tuple[str, str] | None:
    """A PV's CSI driver and volume handle as NodeVolumeLimits counts it: ``spec.csi``, or an
    in-tree source of a migrated plugin translated (``None``: not counted — another in-tree
    source, or one the translator refuses)."""
    csi = mapping(spec, "csi", "spec")
    if csi:
        return text(csi, "driver", "spec.csi"), text(csi, "volumeHandle", "spec.csi")
    for field, (plugin, driver) in _SOURCES.items():
        source = mapping(spec, field, "spec")
        if not source:
            continue
        if plugin not in MIGRATED_DRIVERS:
            return None
        try:
            return driver, _handle(field, source, f"spec.{field}", labels)
        except TranslationError:
            return None
    return None


@dataclass(frozen=True, slots=True)
class InlineVolume:
    """An in-tree volume written in the pod (``spec.volumes[].awsElasticBlockStore`` …), as
    ``TranslateInTreeInlineVolumeToCSI`` makes it."""

    name: str  # spec.volumes[].name
    driver: str  # the CSI driver its plugin migrates to
    handle: str = ""
    #: counted by NodeVolumeLimits (its plugin's migration is on), on a node with a CSINode
    counted: bool = True
    #: kube's error when the translator refuses it (``converting volume(…) from inline to csi:
    #: …``): NodeVolumeLimits' Filter fails with it on a node with a CSINode
    error: str = ""


def inline_volumes(spec: Mapping[str, object]) -> tuple[InlineVolume, ...]:
    """The in-tree volumes of ``spec.volumes``, in order (``FieldError`` for a field of the
    wrong type)."""
    out: list[InlineVolume] = []
    for i, item in enumerate(sequence(spec, "volumes", "spec")):
        path = f"spec.volumes[{i}]"
        volume = entry(item, path)
        for field, (plugin, driver) in _SOURCES.items():
            if volume.get(field) is None:
                continue
            name = text(volume, "name", path)
            if plugin not in MIGRATED_DRIVERS:
                out.append(InlineVolume(name, driver, counted=False))
                break
            source = mapping(volume, field, path)
            try:
                handle = _handle(field, source, f"{path}.{field}", {})
            except TranslationError as bad:
                error = f"converting volume({name}) from inline to csi: {bad}"
                out.append(InlineVolume(name, driver, error=error))
                break
            out.append(InlineVolume(name, driver, handle))
            break
    return tuple(out)


def bound_inline_volumes(spec: Mapping[str, object]) -> tuple[InlineVolume, ...]:
    """:func:`inline_volumes` of a running pod, leniently: ``()`` where ``spec.volumes``
    cannot be read (the API server accepted it)."""
    try:
        return inline_volumes(spec)
    except FieldError:
        return ()


def inline_source(volume: InlineVolume) -> dict[str, object] | None:
    """A ``spec.volumes`` entry that :func:`inline_volumes` reads back as ``volume`` (a bound
    pod written again, for a copy of the cluster), or ``None`` for one not counted or refused
    (only its driver and kube's message are kept)."""
    if not volume.counted or volume.error:
        return None
    handle = volume.handle
    for field, (_, driver) in _SOURCES.items():
        if driver != volume.driver:
            continue
        if field == "gcePersistentDisk":  # inline: projects/UNSPECIFIED/zones/UNSPECIFIED/…
            source: dict[str, object] = {"pdName": handle.rsplit("/", 1)[-1]}
        elif field == "azureDisk":
            source = {"diskName": handle.rsplit("/", 1)[-1], "diskURI": handle, "kind": "Managed"}
        else:
            source = {"volumeID": handle}
        return {"name": volume.name, field: source}
    return None
