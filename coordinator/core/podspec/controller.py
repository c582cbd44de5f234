"""The pod's controller (``metadata.ownerReferences`` with ``controller: true``): kube-scheduler's
default topology spreading takes the selector of a ReplicationController, ReplicaSet or
StatefulSet that controls the pod."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.core.podspec.fields import sequence

__all__ = ["ControllerRef", "controller_ref"]


@dataclass(frozen=True, slots=True)
class ControllerRef:
    api_version: str  # "v1", "apps/v1", …
    kind: str
    name: str


def controller_ref(meta: Mapping[str, object]) -> ControllerRef | None:
    """The owner reference marked ``controller: true`` (as ``metav1.GetControllerOf``); ``None``
    when the pod has none."""
    for ref in sequence(meta, "ownerReferences", "metadata"):
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ControllerRef(
                str(ref.get("apiVersion") or ""),
                str(ref.get("kind") or ""),
                str(ref.get("name") or ""),
            )
    return None
