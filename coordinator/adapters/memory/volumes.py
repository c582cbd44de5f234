"""PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes and VolumeAttachments of
the in-memory cluster: :class:`MemoryVolumes` keeps the objects as given (with a
``resourceVersion``), feeds the view's :class:`~coordinator.core.snapshot.volumes.Volumes`, and
takes the scheduler's volume writes as the API server would. There is no PV controller: a claim
given ``selected-node`` or a PV given a ``claimRef`` stays as written until the caller applies
its next version."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from typing import Any, Final, get_args

from coordinator.core.snapshot.volumes import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    VolumeKind,
    Volumes,
    VolumeWrites,
)
from coordinator.engine.ports import BindConflict, PodRef

__all__ = ["KINDS", "MemoryVolumes"]

KINDS: Final[tuple[VolumeKind, ...]] = get_args(VolumeKind)


def _key(kind: VolumeKind, namespace: str, name: str) -> str:
    return f"{namespace or 'default'}/{name}" if kind == "PersistentVolumeClaim" else name


class MemoryVolumes:
    def __init__(self, *, versions: itertools.count[int]) -> None:
        self._rv = versions
        self._objects: dict[VolumeKind, dict[str, dict[str, Any]]] = {k: {} for k in KINDS}
        #: What the scheduler's view reads.
        self.store = Volumes()

    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace a claim (namespace ``default`` unless given), PV, StorageClass,
        CSINode or VolumeAttachment; returns it as stored."""
        kind = manifest.get("kind")
        if kind not in KINDS:
            raise ValueError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
        obj = copy.deepcopy(dict(manifest))
        meta = obj.setdefault("metadata", {})
        if kind == "PersistentVolumeClaim":
            meta.setdefault("namespace", "default")
        meta.setdefault("uid", f"{kind}-{meta.get('name')}")
        meta["resourceVersion"] = str(next(self._rv))
        self._objects[kind][_key(kind, meta.get("namespace", ""), meta["name"])] = obj
        self.store.put(kind, obj)
        return copy.deepcopy(obj)

    def get(self, kind: VolumeKind, name: str, namespace: str = "") -> dict[str, Any] | None:
        obj = self._objects[kind].get(_key(kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def delete(self, kind: VolumeKind, name: str, namespace: str = "") -> None:
        key = _key(kind, namespace, name)
        if self._objects[kind].pop(key, None) is not None:
            self.store.remove(kind, key)

    def bind(self, pod: PodRef, writes: VolumeWrites) -> None:
        """:meth:`~coordinator.engine.ports.VolumeWriter.bind_volumes`."""
        for pv, claim in writes.bind:
            obj = self._objects["PersistentVolume"].get(pv.name)
            if obj is None or obj["metadata"]["resourceVersion"] != pv.resource_version:
                raise BindConflict(
                    f"persistentvolume {pv.name} changed since {pod.key} was decided"
                )
            obj["metadata"].setdefault("annotations", {})[ANN_BOUND_BY_CONTROLLER] = "yes"
            obj.setdefault("spec", {})["claimRef"] = {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": claim.namespace,
                "name": claim.name,
                "uid": claim.uid,
            }
            self.apply(obj)
        for claim in writes.provision:
            obj = self._objects["PersistentVolumeClaim"].get(claim.key)
            if obj is None:
                raise BindConflict(f"persistentvolumeclaim {claim.key} is gone")
            obj["metadata"].setdefault("annotations", {})[ANN_SELECTED_NODE] = writes.node
            self.apply(obj)
