"""Keeps the inventory in step with the API server: every Node, and every pod bound to a node and
not finished — whichever scheduler bound it, since they all hold capacity.

Each resource is list-then-watch from the list's resourceVersion; a watch the server ends is
resumed from the last seen resourceVersion (bookmarks keep it fresh), a ``410 Gone`` triggers a
re-list whose result *replaces* what the inventory holds (so deletions missed meanwhile are not
kept), and API errors back off with jitter.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Final

from common.kube import NODES, PODS, Gone, KubeClient, KubeError, KubeObject, Resource
from coordinator.inventory.state import BoundPod, KubeNode
from coordinator.inventory.store import Inventory
from coordinator.inventory.translate import bound_pod, kube_node

log = logging.getLogger(__name__)

BOUND_PODS_SELECTOR: Final = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
_PAGE: Final = 500
_WATCH_TIMEOUT_S: Final = 300


class KubeSync:
    def __init__(
        self,
        client: KubeClient,
        inventory: Inventory,
        *,
        on_synced: Callable[[], None] | None = None,
        backoff_max_s: float = 30.0,
        watch_timeout_s: int = _WATCH_TIMEOUT_S,
    ) -> None:
        """``watch_timeout_s``: how long the server keeps one watch open before it is resumed."""
        self._client = client
        self._inventory = inventory
        self._on_synced = on_synced
        self._backoff_max_s = backoff_max_s
        self._watch_timeout_s = watch_timeout_s
        self._synced: set[str] = set()
        self.relists = 0

    async def run(self) -> None:
        await asyncio.gather(
            self._loop(NODES, None, self._apply_nodes, self._node_event),
            self._loop(PODS, BOUND_PODS_SELECTOR, self._apply_pods, self._pod_event),
        )

    async def _list(self, resource: Resource, selector: str | None) -> tuple[list[KubeObject], str]:
        items: list[KubeObject] = []
        token: str | None = None
        while True:
            page = await self._client.list(
                resource, field_selector=selector, limit=_PAGE, continue_token=token
            )
            items.extend(page["items"])
            token = page["continue"]
            if not token:
                return items, page["resourceVersion"]

    async def _loop(
        self,
        resource: Resource,
        selector: str | None,
        apply_all: Callable[[list[KubeObject]], None],
        apply_event: Callable[[str, KubeObject], None],
    ) -> None:
        attempt = 0
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    items, rv = await self._list(resource, selector)
                    self.relists += 1
                    apply_all(items)
                    self._mark_synced(resource.plural)
                async for kind, obj in self._client.watch(
                    resource,
                    field_selector=selector,
                    resource_version=rv,
                    timeout_seconds=self._watch_timeout_s,
                    bookmarks=True,
                ):
                    attempt = 0
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if kind != "BOOKMARK":
                        apply_event(kind, obj)
                # The server ended the watch (timeoutSeconds): resume from rv.
            except Gone:
                log.info("watch of %s expired (410 Gone); re-listing", resource.plural)
                rv = None
            except KubeError as exc:
                delay = min(self._backoff_max_s, 0.5 * 2**attempt) * random.uniform(0.5, 1.0)
                attempt += 1
                log.warning("%s sync failed (%s); retrying in %.1fs", resource.plural, exc, delay)
                await asyncio.sleep(delay)

    def _mark_synced(self, what: str) -> None:
        self._synced.add(what)
        if len(self._synced) == 2 and self._on_synced is not None:
            self._on_synced()

    def _apply_nodes(self, items: list[KubeObject]) -> None:
        self._inventory.replace_nodes([kube_node(obj) for obj in items])

    def _apply_pods(self, items: list[KubeObject]) -> None:
        pods: list[BoundPod] = []
        for obj in items:
            pod = bound_pod(obj)
            if pod is not None:
                pods.append(pod)
        self._inventory.replace_pods(pods)

    def _node_event(self, kind: str, obj: KubeObject) -> None:
        node: KubeNode = kube_node(obj)
        if kind == "DELETED":
            self._inventory.delete_node(node.name)
        else:
            self._inventory.upsert_node(node)

    def _pod_event(self, kind: str, obj: KubeObject) -> None:
        pod = bound_pod(obj)
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        if kind == "DELETED" or pod is None:
            self._inventory.delete_pod(uid)
        else:
            self._inventory.upsert_pod(pod)
