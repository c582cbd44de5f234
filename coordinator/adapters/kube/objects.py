"""A list-then-watch cache of one namespaced resource type: PodGroups, PodDisruptionBudgets.

``ObjectCache.objects`` maps ``(namespace, name)`` to the object as the API server returns it.
List, then watch from the list's resourceVersion; a watch the server ends is resumed, ``410 Gone``
re-lists and the list *replaces* the cache; API errors back off with jitter. A resource whose type
is not installed (the PodGroup CRD absent: ``404``) is treated as empty and listed again later,
so the coordinator runs without the CRD and picks the type up once it is installed.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Final

from common.kube import Gone, KubeClient, KubeError, KubeObject, NotFound, Resource

log = logging.getLogger(__name__)

__all__ = ["PDBS", "ObjectCache", "object_key"]

#: policy/v1 PodDisruptionBudgets (the preemption step reads them; evictions honour them too).
PDBS: Final = Resource(
    "policy", "v1", "poddisruptionbudgets", namespaced=True, kind="PodDisruptionBudget"
)
_PAGE: Final = 500
_WATCH_TIMEOUT_S: Final = 300
_ABSENT_RETRY_S: Final = 15.0

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
        backoff_max_s: float = 30.0,
    ) -> None:
        self._client = client
        self.resource = resource
        self._namespace = namespace
        self._on_change = on_change
        self._backoff_max_s = backoff_max_s
        self.objects: dict[Key, KubeObject] = {}
        self.synced = asyncio.Event()
        self.installed = True  # False while the API server does not serve the type

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
                log.exception("%s change handler failed for %s/%s", self.resource.plural, *key)

    def _replace(self, items: list[KubeObject]) -> None:
        fresh = {object_key(obj): obj for obj in items}
        for key in tuple(self.objects):
            if key not in fresh:
                self._set(key, None)
        for key, obj in fresh.items():
            if self.objects.get(key) != obj:
                self._set(key, obj)

    async def _list(self) -> tuple[list[KubeObject], str]:
        items: list[KubeObject] = []
        token: str | None = None
        while True:
            page = await self._client.list(
                self.resource, namespace=self._namespace, limit=_PAGE, continue_token=token
            )
            items.extend(page["items"])
            token = page["continue"]
            if not token:
                return items, page["resourceVersion"]

    async def run(self) -> None:
        attempt = 0
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    try:
                        items, rv = await self._list()
                    except NotFound:
                        if self.installed:
                            log.info(
                                "%s.%s is not served by the API server; treating it as empty",
                                self.resource.plural,
                                self.resource.group,
                            )
                        self.installed = False
                        self._replace([])
                        self.synced.set()
                        await asyncio.sleep(_ABSENT_RETRY_S)
                        continue
                    self.installed = True
                    self._replace(items)
                    self.synced.set()
                async for kind, obj in self._client.watch(
                    self.resource,
                    namespace=self._namespace,
                    resource_version=rv,
                    timeout_seconds=_WATCH_TIMEOUT_S,
                    bookmarks=True,
                ):
                    attempt = 0
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if kind == "DELETED":
                        self._set(object_key(obj), None)
                    elif kind in ("ADDED", "MODIFIED"):
                        self._set(object_key(obj), obj)
            except Gone:
                rv = None
            except KubeError as exc:
                delay = min(self._backoff_max_s, 0.5 * 2**attempt) * random.uniform(0.5, 1.0)
                attempt += 1
                log.warning(
                    "%s watch failed (%s); retrying in %.1fs", self.resource.plural, exc, delay
                )
                await asyncio.sleep(delay)
                if isinstance(exc, NotFound):
                    rv = None
