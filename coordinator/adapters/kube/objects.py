"""A cache of one namespaced resource type, kept by a :class:`~.reflector.Reflector`:
PodGroups (scheduler-plugins' and the Workload API's), PodDisruptionBudgets.

``ObjectCache.objects`` maps ``(namespace, name)`` (or what ``key=`` makes of an object) to the
object as the API server returns it. A resource whose type is not installed or not served (the
PodGroup CRD absent, the Workload API's alpha version off: ``404``) is treated as empty and listed
again later, so the coordinator runs without it and picks the type up once it is served.
:class:`MergedObjects` reads several caches as one mapping (both kinds of PodGroup for the gangs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from common.kube import KubeClient, KubeObject, Resource
from coordinator.adapters.kube.reflector import Change, Reflector

log = logging.getLogger(__name__)

__all__ = ["PDBS", "WORKLOAD_POD_GROUPS", "MergedObjects", "ObjectCache", "object_key"]

#: policy/v1 PodDisruptionBudgets (the preemption step reads them; evictions honour them too).
PDBS: Final = Resource(
    "policy", "v1", "poddisruptionbudgets", namespaced=True, kind="PodDisruptionBudget"
)
#: The Workload API's PodGroups (scheduling.k8s.io/v1alpha2; served only with the alpha gates).
WORKLOAD_POD_GROUPS: Final = Resource(
    "scheduling.k8s.io", "v1alpha2", "podgroups", namespaced=True, kind="PodGroup"
)

Key = tuple[str, str]


def object_key(obj: KubeObject) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


class ObjectCache:
    """Event-loop only. ``on_change(key, obj_or_None)`` runs after every change is applied."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        on_change: Callable[[Key, KubeObject | None], None] | None = None,
        key: Callable[[KubeObject], Key] = object_key,
        backoff_max_s: float = 30.0,
    ) -> None:
        self._on_change = on_change
        self._key = key
        self.objects: dict[Key, KubeObject] = {}
        self.reflector = Reflector(
            client,
            resource,
            self,
            namespace=namespace,
            missing_ok=True,
            backoff_max_s=backoff_max_s,
        )
        self.synced = self.reflector.synced

    async def run(self) -> None:
        await self.reflector.run()

    def _set(self, key: Key, obj: KubeObject | None) -> None:
        if obj is None:
            if self.objects.pop(key, None) is None:
                return
        else:
            self.objects[key] = obj
        if self._on_change is not None:
            try:
                self._on_change(key, obj)
            except Exception:
                log.exception("%s change handler failed for %s/%s", self.reflector.what, *key)

    def replace(self, items: list[KubeObject]) -> None:
        fresh = {self._key(obj): obj for obj in items}
        for key in tuple(self.objects):
            if key not in fresh:
                self._set(key, None)
        for key, obj in fresh.items():
            if self.objects.get(key) != obj:
                self._set(key, obj)

    def apply(self, kind: Change, obj: KubeObject) -> None:
        self._set(self._key(obj), None if kind == "DELETED" else obj)


class MergedObjects(Mapping[Key, KubeObject]):
    """Several caches' objects read as one mapping (their keys must not meet)."""

    def __init__(self, *parts: Mapping[Key, KubeObject]) -> None:
        self._parts = parts

    def __getitem__(self, key: Key) -> KubeObject:
        for part in self._parts:
            obj = part.get(key)
            if obj is not None:
                return obj
        raise KeyError(key)

    def __iter__(self) -> Iterator[Key]:
        for part in self._parts:
            yield from part

    def __len__(self) -> int:
        return sum(len(part) for part in self._parts)
