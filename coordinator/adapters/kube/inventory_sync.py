"""Keeps the inventory in step with the API server: every Node, and every pod bound to a node and
not finished — whichever scheduler bound it, since they all hold capacity.

One :class:`~.reflector.Reflector` per resource; a (re-)list *replaces* what the inventory holds
of it, so deletions missed while nobody watched are not kept.

Most watch events change nothing the scheduler uses: Node status heartbeats (conditions' times,
addresses, images) and pod status churn (phase, container statuses, IPs). They are translated
cheaply — a node's published topology is parsed again only when its annotation changed
(:class:`~coordinator.inventory.translate.TopologyMemo`) — and, being equal to what the inventory
holds, stop there: no inventory event, so no node is rebuilt and no pod requeued. Cheaper still,
most never get that far: the reflectors drop a ``MODIFIED`` event whose
:mod:`~.watchdecode` digest (the parts these handlers read, taken from the raw JSON) equals the
last one handed over, before it is decoded. ``unchanged`` counts both kinds, ``applied`` the
rest, by resource.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Final

from common.kube import NODES, PODS, KubeClient, KubeObject
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.adapters.kube.watchdecode import BoundPodLines, node_fingerprint
from coordinator.inventory.state import BoundPod
from coordinator.inventory.store import Inventory
from coordinator.inventory.translate import (
    TopologyMemo,
    bound_pod,
    bound_pod_fields,
    kube_node,
    node_fields,
    ran_to_end,
    restatused,
)

BOUND_PODS_SELECTOR: Final = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


class _Nodes:
    def __init__(self, inventory: Inventory, counts: Counter[tuple[str, str]]) -> None:
        self._inventory = inventory
        self._memo = TopologyMemo()
        self._counts = counts

    def replace(self, items: list[KubeObject]) -> None:
        nodes = [kube_node(obj, self._memo) for obj in items]
        self._memo.keep_only(n.name for n in nodes)
        self._inventory.replace_nodes(nodes)

    def apply(self, kind: Change, obj: KubeObject) -> None:
        node = kube_node(obj, self._memo)
        if kind == "DELETED":
            self._memo.forget(node.name)
            self._inventory.delete_node(node.name)
            changed = True
        else:
            changed = self._inventory.upsert_node(node)
        self._counts["nodes", "applied" if changed else "unchanged"] += 1


class _BoundPods:
    def __init__(self, inventory: Inventory, counts: Counter[tuple[str, str]]) -> None:
        self._inventory = inventory
        self._counts = counts
        self.lines = BoundPodLines(known=lambda uid: inventory.bound_pod(uid) is not None)

    def replace(self, items: list[KubeObject]) -> None:
        self.lines.forget()
        pods: list[BoundPod] = []
        for obj in items:
            pod = bound_pod(obj)
            if pod is not None:
                pods.append(pod)
        self._inventory.replace_pods(pods)

    def _translated(self, kind: Change, obj: KubeObject) -> BoundPod | None:
        # A deleted pod needs only its UID: not read whole (SchedulingWhileGated deletes a bound
        # pod for each one it schedules).
        if kind == "DELETED":
            return None
        if "spec" not in obj:  # its status alone changed (BoundPodLines): it started
            held = self._inventory.bound_pod(str(obj["metadata"]["uid"]))
            if held is not None:
                return restatused(held, obj["status"])
        return bound_pod(obj)

    def apply(self, kind: Change, obj: KubeObject) -> None:
        pod = self._translated(kind, obj)
        if pod is None:
            uid = str((obj.get("metadata") or {}).get("uid", ""))
            self._inventory.delete_pod(uid, ended=kind != "DELETED" and ran_to_end(obj))
            changed = True
        else:
            changed = self._inventory.upsert_pod(pod)
        self._counts["bound pods", "applied" if changed else "unchanged"] += 1


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
        #: Watch events by (resource, "applied" | "unchanged").
        self.events: Counter[tuple[str, str]] = Counter()
        pods = _BoundPods(inventory, self.events)
        self._reflectors = tuple(
            Reflector(
                client,
                resource,
                handler,
                field_selector=selector,
                what=what,
                slim=slim,
                decode=decode,
                fingerprint=fingerprint,
                on_unchanged=self._counter(what),
                on_listed=self._listed,
                backoff_max_s=backoff_max_s,
                watch_timeout_s=watch_timeout_s,
            )
            for resource, handler, selector, what, slim, decode, fingerprint in (
                (
                    NODES,
                    _Nodes(inventory, self.events),
                    None,
                    "nodes",
                    node_fields,
                    None,
                    node_fingerprint,
                ),
                (
                    PODS,
                    pods,
                    BOUND_PODS_SELECTOR,
                    "bound pods",
                    bound_pod_fields,
                    pods.lines.decode,
                    pods.lines.fingerprint,
                ),
            )
        )

    def _counter(self, what: str) -> Callable[[], None]:
        key = (what, "unchanged")

        def count() -> None:
            self.events[key] += 1

        return count

    @property
    def relists(self) -> int:
        return sum(r.relists for r in self._reflectors)

    async def run(self) -> None:
        await asyncio.gather(*(r.run() for r in self._reflectors))

    def _listed(self) -> None:
        if self._on_synced is not None and all(r.synced.is_set() for r in self._reflectors):
            self._on_synced()
