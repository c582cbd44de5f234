"""Watches of the Dynamic Resource Allocation objects, feeding a
:class:`~coordinator.inventory.dra.DraStore`.

Five :class:`~.reflector.Reflector` loops: ResourceSlices, DeviceClasses and DeviceTaintRules
(cluster-scoped), ResourceClaims and NVIDIA's ComputeDomains (in the namespace the coordinator
serves, or all). An API server that does not serve ``resource.k8s.io/v1`` counts as having no
DRA objects and is asked again later, so the coordinator runs on clusters without DRA unchanged;
one that does not serve DeviceTaintRules (``resource.k8s.io/v1beta2``, off by default in
Kubernetes 1.36) has none; one without NVIDIA's DRA driver (no ``resource.nvidia.com``) has no
ComputeDomains.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from common.kube import (
    COMPUTE_DOMAINS,
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeClient,
    KubeObject,
    Resource,
)
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.inventory.dra import DraKind, DraStore, object_key

__all__ = ["DraWatch", "dra_watch"]


class _Feed:
    """One kind's side of its reflector."""

    def __init__(self, store: DraStore, kind: DraKind) -> None:
        self._store = store
        self._kind = kind

    def replace(self, items: list[KubeObject]) -> None:
        self._store.replace(self._kind, list(items))

    def apply(self, kind: Change, obj: KubeObject) -> None:
        key = object_key(self._kind, obj)
        self._store.apply(self._kind, key, None if kind == "DELETED" else obj)


@dataclass(frozen=True, slots=True)
class DraWatch:
    reflectors: tuple[Reflector, ...]

    @property
    def feeds(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        return [r.run for r in self.reflectors]

    @property
    def synced(self) -> list[asyncio.Event]:
        return [r.synced for r in self.reflectors]


def dra_watch(
    client: KubeClient,
    store: DraStore,
    *,
    namespace: str | None = None,
    backoff_max_s: float = 30.0,
) -> DraWatch:
    """The reflectors that keep ``store`` current; run each one's ``run()``."""
    kinds: tuple[tuple[Resource, DraKind, str | None], ...] = (
        (RESOURCE_SLICES, "ResourceSlice", None),
        (DEVICE_CLASSES, "DeviceClass", None),
        (RESOURCE_CLAIMS, "ResourceClaim", namespace),
        (DEVICE_TAINT_RULES, "DeviceTaintRule", None),
        (COMPUTE_DOMAINS, "ComputeDomain", namespace),
    )
    return DraWatch(
        tuple(
            Reflector(
                client,
                resource,
                _Feed(store, kind),
                namespace=ns,
                missing_ok=True,
                backoff_max_s=backoff_max_s,
            )
            for resource, kind, ns in kinds
        )
    )
