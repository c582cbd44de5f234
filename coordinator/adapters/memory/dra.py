"""The DRA objects of the in-memory cluster: ResourceSlices, DeviceClasses and ResourceClaims
kept as the API server would return them, fed to a
:class:`~coordinator.inventory.dra.DraStore` as the watches of
:mod:`coordinator.adapters.kube.dra` would, and the claim writes of
:mod:`coordinator.adapters.kube.claims` played the same way: ``resourceVersion`` preconditions (a
claim changed since the decision is a :class:`~coordinator.engine.ports.BindConflict`), the
``delete-protection`` finalizer, ``status.allocation`` and ``status.reservedFor``, and
extended-resource claims created for the pod.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from coordinator.core.dra.model import ClaimAllocation
from coordinator.engine.claimstatus import (
    DELETE_PROTECTION,
    EXTENDED_CLAIM_ANNOTATION,
    allocation_status,
    consumer,
)
from coordinator.engine.ports import BindConflict, PodRef
from coordinator.inventory.dra import DraKind, DraStore, object_key

__all__ = ["MemoryDra"]


class MemoryDra:
    """Event-loop only. ``store`` is what the scheduler's view reads."""

    def __init__(self, store: DraStore | None = None, *, versions: Iterator[int] | None = None):
        self.store = store if store is not None else DraStore()
        self._rv = versions if versions is not None else itertools.count(1)
        self._objects: dict[DraKind, dict[str, dict[str, Any]]] = {
            "ResourceSlice": {},
            "DeviceClass": {},
            "ResourceClaim": {},
            "DeviceTaintRule": {},
            "ComputeDomain": {},
        }

    # --- objects -------------------------------------------------------------------------------

    def put(self, kind: DraKind, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace an object (``kubectl apply``); returns it as stored. A new object
        keeps a ``uid`` it has (one copied from another cluster), else gets one."""
        obj = copy.deepcopy(dict(manifest))
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError(f"{kind} manifest needs metadata.name")
        if kind in ("ResourceClaim", "ComputeDomain"):
            meta.setdefault("namespace", "default")
        key = object_key(kind, obj)
        old = self._objects[kind].get(key)
        meta["uid"] = old["metadata"]["uid"] if old else meta.get("uid") or str(uuid.uuid4())
        return self._save(kind, key, obj)

    def _save(self, kind: DraKind, key: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self._objects[kind][key] = obj
        self.store.apply(kind, key, copy.deepcopy(obj))
        return copy.deepcopy(obj)

    def delete(self, kind: DraKind, key: str) -> bool:
        if self._objects[kind].pop(key, None) is None:
            return False
        self.store.apply(kind, key, None)
        return True

    def get(self, kind: DraKind, key: str) -> dict[str, Any] | None:
        obj = self._objects[kind].get(key)
        return None if obj is None else copy.deepcopy(obj)

    def unreserve(self, pod_uid: str) -> None:
        """What kube-controller-manager does for a pod that finished or is gone: it leaves every
        ``reservedFor``; a claim nobody reserves any more is deallocated and unprotected."""
        for key, obj in tuple(self._objects["ResourceClaim"].items()):
            status = obj.get("status") or {}
            reserved = status.get("reservedFor") or []
            kept = [r for r in reserved if r.get("uid") != pod_uid]
            if len(kept) == len(reserved):
                continue
            status["reservedFor"] = kept
            if not kept:
                status.pop("allocation", None)
                _unprotect(obj)
            obj["status"] = status
            self._save("ResourceClaim", key, obj)

    # --- claim writes --------------------------------------------------------------------------

    def allocate(
        self, pod: PodRef, claims: Sequence[ClaimAllocation]
    ) -> tuple[ClaimAllocation, ...]:
        """All or nothing, as the API server writer."""
        written: list[ClaimAllocation] = []
        try:
            for claim in claims:
                written.append(self._allocate_one(pod, claim))
        except BindConflict:
            self.release(pod, written)
            raise
        return tuple(written)

    def _allocate_one(self, pod: PodRef, claim: ClaimAllocation) -> ClaimAllocation:
        if claim.extended:
            name = f"{pod.name}-extended-resources-{uuid.uuid4().hex[:5]}"
            obj: dict[str, Any] = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": name,
                    "namespace": pod.namespace,
                    "uid": str(uuid.uuid4()),
                    "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "name": pod.name,
                            "uid": pod.uid,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                    "finalizers": [DELETE_PROTECTION],
                },
                "spec": copy.deepcopy(dict(claim.spec or {})),
            }
            meta = obj["metadata"]
            claim = dataclasses.replace(claim, name=name, uid=str(meta["uid"]))
        else:
            found = self._objects["ResourceClaim"].get(claim.key)
            if found is None:
                raise BindConflict(f"claim {claim.key} not found")
            version = str(found["metadata"].get("resourceVersion"))
            if claim.resource_version and version != claim.resource_version:
                raise BindConflict(
                    f"claim {claim.key} changed since the decision "
                    f"(resourceVersion {version}, decided on {claim.resource_version})"
                )
            if claim.results and (found.get("status") or {}).get("allocation"):
                raise BindConflict(f"claim {claim.key} is allocated already")
            obj = copy.deepcopy(found)
        status = obj.setdefault("status", {})
        if claim.results:
            finalizers = obj["metadata"].setdefault("finalizers", [])
            if DELETE_PROTECTION not in finalizers:
                finalizers.append(DELETE_PROTECTION)
            status["allocation"] = allocation_status(claim)
        reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != pod.uid]
        status["reservedFor"] = [*reserved, consumer(pod)]
        saved = self._save("ResourceClaim", claim.key, obj)
        return dataclasses.replace(claim, resource_version=saved["metadata"]["resourceVersion"])

    def release(self, pod: PodRef, claims: Sequence[ClaimAllocation]) -> None:
        for claim in reversed(claims):
            obj = self._objects["ResourceClaim"].get(claim.key)
            if obj is None:
                continue
            if claim.extended:
                self.delete("ResourceClaim", claim.key)
                continue
            status = obj.setdefault("status", {})
            status["reservedFor"] = [
                r for r in status.get("reservedFor") or [] if r.get("uid") != pod.uid
            ]
            if claim.results:
                status.pop("allocation", None)
                _unprotect(obj)
            self._save("ResourceClaim", claim.key, obj)


def _unprotect(obj: dict[str, Any]) -> None:
    finalizers = [f for f in obj["metadata"].get("finalizers") or [] if f != DELETE_PROTECTION]
    obj["metadata"]["finalizers"] = finalizers
