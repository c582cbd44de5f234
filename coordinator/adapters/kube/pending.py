"""Feeds the scheduling queue from the API server: every pod with ``spec.schedulerName: topos``
that is not bound yet.

A :class:`~.reflector.Reflector` with a field selector, so the server sends only our pods that
have not ended (optionally of one namespace). The selector leaves ``spec.nodeName`` out on
purpose: the API server gives a watch that selects an exact ``spec.nodeName`` (``=``, its
indexed trigger) a buffer of 10 events and closes it when a burst fills that, where other pod
watches get up to 1,000 (kube-apiserver's ``suggestedWatchChannelSize``); at a few hundred pods
per second it closed ours a dozen times a run. So a pod that has a node is turned into the
``DELETED`` the server would have sent for it (:func:`~.watchdecode.pending_pod_event`, before
the line is decoded whole) and lists skip it.

A pod that gets bound (by us or anyone) arrives as ``DELETED``, as does a deleted pod — either
way it leaves the queue. The event carries no more than the pod's metadata as last pending,
so the two cannot be told apart here: the room assumed for the pod is settled by its bind (it
fails for a deleted pod) or by the inventory. A pending pod seen with a ``deletionTimestamp`` is
known to be going and releases what was held for it at once. A (re-)list *replaces* the queue's
view: pods gone meanwhile are dropped, pods being bound stay.
"""

from __future__ import annotations

from common import podkeys
from common.kube import PODS, KubeClient, KubeObject
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.adapters.kube.watchdecode import pending_pod_event
from coordinator.core.queue import SchedulingQueue

__all__ = ["PendingPods", "pending_selector", "pending_watch", "unbound"]


def pending_selector(scheduler_name: str = podkeys.SCHEDULER_NAME) -> str:
    """Our pods that have not ended, bound or not (bound ones are dropped as they come)."""
    return f"spec.schedulerName={scheduler_name},status.phase!=Succeeded,status.phase!=Failed"


def unbound(items: list[KubeObject]) -> list[KubeObject]:
    """The listed pods that have no node yet."""
    return [obj for obj in items if not (obj.get("spec") or {}).get("nodeName")]


class PendingPods:
    """The queue's side of the pending-pod watch."""

    def __init__(self, queue: SchedulingQueue, scheduler_name: str | None = None) -> None:
        self._queue = queue
        self._scheduler_name = scheduler_name
        """The profile whose pods this watch lists: its lists replace only those."""

    def replace(self, items: list[KubeObject]) -> None:
        pending = []
        for obj in unbound(items):
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                self._queue.delete(obj, gone=True)
            else:
                pending.append(obj)
        self._queue.replace(pending, scheduler_name=self._scheduler_name)

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
        PendingPods(queue, scheduler_name),
        namespace=namespace,
        field_selector=pending_selector(scheduler_name),
        what="pending pods",
        decode=pending_pod_event,
    )
