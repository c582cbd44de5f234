"""The PersistentVolumeClaims a pod's volumes name (``spec.volumes``), as kube-scheduler's
VolumeBinding reads them: a ``persistentVolumeClaim`` volume names its claim; a generic
``ephemeral`` volume's claim is ``<pod name>-<volume name>``, made by the ephemeral volume
controller and owned by the pod. Other volume types need no claim and are not kept."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.core.podspec.fields import FieldError, entry, mapping, sequence, text

__all__ = ["PodVolumeClaim", "bound_claim_names", "pod_volume_claims"]


@dataclass(frozen=True, slots=True)
class PodVolumeClaim:
    """One PVC a pod needs: its name, and whether a generic ephemeral volume makes it."""

    name: str
    ephemeral: bool = False


def pod_volume_claims(spec: Mapping[str, object], pod_name: str) -> tuple[PodVolumeClaim, ...]:
    """The claims of ``spec.volumes`` in order (``FieldError`` naming the field for a
    ``persistentVolumeClaim`` without ``claimName``)."""
    out: list[PodVolumeClaim] = []
    for i, item in enumerate(sequence(spec, "volumes", "spec")):
        path = f"spec.volumes[{i}]"
        volume = entry(item, path)
        if volume.get("persistentVolumeClaim") is not None:
            pvc = mapping(volume, "persistentVolumeClaim", path)
            name = text(pvc, "claimName", f"{path}.persistentVolumeClaim")
            if not name:
                raise FieldError(f"{path}.persistentVolumeClaim.claimName", "must not be empty")
            out.append(PodVolumeClaim(name))
        elif volume.get("ephemeral") is not None:
            out.append(PodVolumeClaim(f"{pod_name}-{text(volume, 'name', path)}", ephemeral=True))
    return tuple(out)


def bound_claim_names(spec: Mapping[str, object], pod_name: str) -> tuple[str, ...]:
    """The claims a running pod uses, leniently (the API server accepted it): ``()`` where
    ``spec.volumes`` cannot be read."""
    try:
        return tuple(c.name for c in pod_volume_claims(spec, pod_name))
    except FieldError:
        return ()
