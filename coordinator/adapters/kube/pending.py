"""Feeds the scheduling queue from the API server: every pod with ``spec.schedulerName: topos``
that is not bound yet.

A :class:`~.reflector.Reflector` with a field selector, so the server sends only our pending pods
(optionally of one namespace); a pod that gets bound (by us or anyone) stops matching and arrives
as ``DELETED``, as does a deleted pod — either way it leaves the queue. The server sends the last
*matching* object in both cases, so the two cannot be told apart here: the room assumed for the
pod is settled by its bind (it fails for a deleted pod) or by the inventory. A pod seen with a
``deletionTimestamp`` is known to be going and releases what was held for it at once. A (re-)list
*replaces* the queue's view: pods gone meanwhile are dropped, pods being bound stay.
"""

from __future__ import annotations

from common import podkeys
from common.kube import PODS, KubeClient, KubeObject
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.adapters.kube.watchdecode import pending_pod_event
from coordinator.core.queue import SchedulingQueue

__all__ = ["PendingPods", "pending_selector", "pending_watch"]


def pending_selector(scheduler_name: str = podkeys.SCHEDULER_NAME) -> str:
    return (
        f"spec.schedulerName={scheduler_name},spec.nodeName=,"
        "status.phase!=Succeeded,status.phase!=Failed"
    )


class PendingPods:
    """The queue's side of the pending-pod watch."""

    def __init__(self, queue: SchedulingQueue) -> None:
        self._queue = queue

    def replace(self, items: list[KubeObject]) -> None:
        pending = []
        for obj in items:
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                self._queue.delete(obj, gone=True)
            else:
                pending.append(obj)
        self._queue.replace(pending)

    def apply(self, kind: Change, obj: KubeObject) -> None:
        meta = obj.get("metadata") or {}
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            # DELETED: bound or deleted, the event cannot say which (see above).
            self._queue.delete(obj, gone=bool(meta.get("deletionTimestamp")))
        else:
            self._queue.add(obj)


def pending_watch(
    client: KubeClient,
    queue: SchedulingQueue,
    *,
    scheduler_name: str = podkeys.SCHEDULER_NAME,
    namespace: str | None = None,
) -> Reflector:
    """The reflector that keeps ``queue`` filled with the pending pods; run it with ``run()``."""
    return Reflector(
        client,
        PODS,
        PendingPods(queue),
        namespace=namespace,
        field_selector=pending_selector(scheduler_name),
        what="pending pods",
        decode=pending_pod_event,
    )
