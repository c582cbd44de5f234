"""Keeps the inventory in step with the API server: every Node, and every pod bound to a node and
not finished — whichever scheduler bound it, since they all hold capacity.

One :class:`~.reflector.Reflector` per resource; a (re-)list *replaces* what the inventory holds
of it, so deletions missed while nobody watched are not kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from common.kube import NODES, PODS, KubeClient, KubeObject
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.inventory.state import BoundPod
from coordinator.inventory.store import Inventory
from coordinator.inventory.translate import bound_pod, kube_node

BOUND_PODS_SELECTOR: Final = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


class _Nodes:
    def __init__(self, inventory: Inventory) -> None:
        self._inventory = inventory

    def replace(self, items: list[KubeObject]) -> None:
        self._inventory.replace_nodes([kube_node(obj) for obj in items])

    def apply(self, kind: Change, obj: KubeObject) -> None:
        node = kube_node(obj)
        if kind == "DELETED":
            self._inventory.delete_node(node.name)
        else:
            self._inventory.upsert_node(node)


class _BoundPods:
    def __init__(self, inventory: Inventory) -> None:
        self._inventory = inventory

    def replace(self, items: list[KubeObject]) -> None:
        pods: list[BoundPod] = []
        for obj in items:
            pod = bound_pod(obj)
            if pod is not None:
                pods.append(pod)
        self._inventory.replace_pods(pods)

    def apply(self, kind: Change, obj: KubeObject) -> None:
        pod = bound_pod(obj)
        if kind == "DELETED" or pod is None:
            self._inventory.delete_pod(str((obj.get("metadata") or {}).get("uid", "")))
        else:
            self._inventory.upsert_pod(pod)


class KubeSync:
    def __init__(
        self,
        client: KubeClient,
        inventory: Inventory,
        *,
        on_synced: Callable[[], None] | None = None,
        backoff_max_s: float = 30.0,
        watch_timeout_s: int = 300,
    ) -> None:
        """``on_synced`` runs once both Nodes and bound pods are listed, and after every re-list
        from then on. ``watch_timeout_s``: how long the server keeps one watch open before it is
        resumed."""
        self._on_synced = on_synced
        self._reflectors = tuple(
            Reflector(
                client,
                resource,
                handler,
                field_selector=selector,
                what=what,
                on_listed=self._listed,
                backoff_max_s=backoff_max_s,
                watch_timeout_s=watch_timeout_s,
            )
            for resource, handler, selector, what in (
                (NODES, _Nodes(inventory), None, "nodes"),
                (PODS, _BoundPods(inventory), BOUND_PODS_SELECTOR, "bound pods"),
            )
        )

    @property
    def relists(self) -> int:
        return sum(r.relists for r in self._reflectors)

    async def run(self) -> None:
        await asyncio.gather(*(r.run() for r in self._reflectors))

    def _listed(self) -> None:
        if self._on_synced is not None and all(r.synced.is_set() for r in self._reflectors):
            self._on_synced()
