"""Feeds the scheduling queue from the API server: every pod with ``spec.schedulerName: topos``
that is not bound yet.

List, then watch from the list's resourceVersion, with a field selector so the server sends
only our pending pods (optionally of one namespace); a pod that gets bound (by us or anyone)
stops matching and arrives as ``DELETED``, as does a deleted pod — either way it leaves the
queue. A watch the server ends is resumed from the last resourceVersion (bookmarks keep it
fresh); ``410 Gone`` re-lists and the list *replaces* the queue's view (pods deleted meanwhile
are dropped); API errors back off with jitter.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Final

from common import podkeys
from common.kube import PODS, Gone, KubeClient, KubeError, KubeObject
from coordinator.core.queue import SchedulingQueue, pod_key

log = logging.getLogger(__name__)

__all__ = ["PendingWatcher", "pending_selector"]

_PAGE: Final = 500
_WATCH_TIMEOUT_S: Final = 300


def pending_selector(scheduler_name: str = podkeys.SCHEDULER_NAME) -> str:
    return (
        f"spec.schedulerName={scheduler_name},spec.nodeName=,"
        "status.phase!=Succeeded,status.phase!=Failed"
    )


class PendingWatcher:
    def __init__(
        self,
        client: KubeClient,
        queue: SchedulingQueue,
        *,
        scheduler_name: str = podkeys.SCHEDULER_NAME,
        namespace: str | None = None,
        on_synced: Callable[[], None] | None = None,
        backoff_max_s: float = 30.0,
    ) -> None:
        self._client = client
        self._queue = queue
        self._selector = pending_selector(scheduler_name)
        self._namespace = namespace
        self._on_synced = on_synced
        self._backoff_max_s = backoff_max_s
        self.relists = 0
        self.synced = asyncio.Event()

    async def _list(self) -> tuple[list[KubeObject], str]:
        items: list[KubeObject] = []
        token: str | None = None
        while True:
            page = await self._client.list(
                PODS,
                namespace=self._namespace,
                field_selector=self._selector,
                limit=_PAGE,
                continue_token=token,
            )
            items.extend(page["items"])
            token = page["continue"]
            if not token:
                return items, page["resourceVersion"]

    def _replace(self, items: list[KubeObject]) -> None:
        keep = {pod_key(obj) for obj in items}
        for entry in self._queue.entries():
            if entry.key not in keep and entry.where != "in_flight":
                self._queue.delete(entry.key)
        for obj in items:
            self._apply("ADDED", obj)

    def _apply(self, kind: str, obj: KubeObject) -> None:
        meta = obj.get("metadata") or {}
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            self._queue.delete(pod_key(obj))
        else:
            self._queue.add(obj)

    async def run(self) -> None:
        attempt = 0
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    items, rv = await self._list()
                    self.relists += 1
                    self._replace(items)
                    if not self.synced.is_set():
                        self.synced.set()
                        if self._on_synced is not None:
                            self._on_synced()
                async for kind, obj in self._client.watch(
                    PODS,
                    namespace=self._namespace,
                    field_selector=self._selector,
                    resource_version=rv,
                    timeout_seconds=_WATCH_TIMEOUT_S,
                    bookmarks=True,
                ):
                    attempt = 0
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self._apply(kind, obj)
            except Gone:
                log.info("watch of pending pods expired (410 Gone); re-listing")
                rv = None
            except KubeError as exc:
                delay = min(self._backoff_max_s, 0.5 * 2**attempt) * random.uniform(0.5, 1.0)
                attempt += 1
                log.warning("pending-pod watch failed (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
