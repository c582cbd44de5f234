"""A pod's *shape*: what reading it depends on besides what is its own, as bytes to key a cache
of readings by.

The pods of one workload (a ReplicaSet's, a Job's, a DaemonSet's) differ in their name, uid,
node, status and volumes — a ServiceAccount's token volume is named per pod
(``kube-api-access-<random>``) and mounted in every container — and, a DaemonSet's, in the node
affinity that pins each to its node; in nothing else a reader reads. The shape is the pod's
namespace, labels, annotations and owner references with its spec less the fields the reader
reads per pod (``own``: ``volumes`` always), less the containers' ``volumeMounts`` and less
``affinity.nodeAffinity``. Two pods of one shape read alike but for their own parts, which the
reader then reads for each pod (:func:`~coordinator.core.podspec.parse.parse_pod`,
:func:`~coordinator.inventory.translate.bound_pod`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Generic, TypeVar

import msgspec

__all__ = ["ByShape", "pod_shape"]

T = TypeVar("T")

_ENCODE: Final = msgspec.json.Encoder()


def pod_shape(
    meta: Mapping[str, object], spec: Mapping[str, object], own: tuple[str, ...] = ("volumes",)
) -> bytes | None:
    """The shape of the pod (``None``: one that cannot be encoded; read it whole)."""
    shaped = {k: v for k, v in spec.items() if k not in own}
    affinity = shaped.get("affinity")
    if isinstance(affinity, Mapping) and "nodeAffinity" in affinity:
        # a DaemonSet's pod names its node here (matchFields metadata.name): read per pod
        shaped["affinity"] = {k: v for k, v in affinity.items() if k != "nodeAffinity"}
    for kind in ("containers", "initContainers"):
        containers = shaped.get(kind)
        if isinstance(containers, list):
            shaped[kind] = [
                {k: v for k, v in c.items() if k != "volumeMounts"}
                if isinstance(c, Mapping) and "volumeMounts" in c
                else c
                for c in containers
            ]
    parts = (
        meta.get("namespace"),
        meta.get("labels"),
        meta.get("annotations"),
        meta.get("ownerReferences"),
        shaped,
    )
    try:
        return _ENCODE.encode(parts)
    except (TypeError, ValueError, OverflowError):
        return None


class ByShape(Generic[T]):
    """A reader's readings by shape: the last ``kept`` shapes at most (started afresh when full:
    a workload's shape is found again at its next pod)."""

    __slots__ = ("_kept", "_readings")

    def __init__(self, kept: int = 512) -> None:
        self._kept = kept
        self._readings: dict[bytes, T] = {}

    def __len__(self) -> int:
        return len(self._readings)

    def get(self, shape: bytes | None) -> T | None:
        return None if shape is None else self._readings.get(shape)

    def keep(self, shape: bytes | None, reading: T) -> None:
        if shape is None:
            return
        if len(self._readings) >= self._kept:
            self._readings.clear()
        self._readings[shape] = reading

    def clear(self) -> None:
        self._readings.clear()
