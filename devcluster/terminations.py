"""The kubelet's last word on a deleted pod, for the simulated nodes: once a pod bound to one of
them is being deleted (``deletionTimestamp`` set: ``kubectl delete``, an eviction, a Job or
StatefulSet scaling down), its containers count as stopped a second later and the pod object is
removed — with the pod's UID as the delete's precondition, as the kubelet's status manager
deletes (``metav1.NewPreconditionDeleteOptions(string(pod.UID))``). A pod re-created under the
same name meanwhile is another pod and is left alone (the delete fails with ``Conflict``), as is
one already gone (``NotFound``). A pod that still carries finalizers (a Job's tracking finalizer)
goes once their owners remove them: the API server deletes it then, its grace period being 0.

Why not KWOK: its stages' ``delete`` (v0.8.0, and its main branch as of 2026-08) deletes by name
from a queue keyed by name, without a UID precondition, so a delete queued for a pod that is
already gone landed on a pod re-created under its name within the second (devcluster/kubelet.py).

Runs in the simulated nodes' process (``python -m devcluster.nodes --remove-deleted-pods``, as
``devcluster up`` and the churn harness's KWOK mode start it), beside their agents, until it
ends; not where that process serves harnesses without a kubelet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Final

from common.kube import (
    PODS,
    Conflict,
    KubeClient,
    KubeError,
    KubeObject,
    NotFound,
    ServerError,
    TooManyRequests,
    Unreachable,
)

log = logging.getLogger(__name__)

STOP_S: Final = 1.0
"""How long after its deletion started a pod's containers count as stopped."""
_RETRY_S: Final = 1.0
_WATCH_TIMEOUT_S: Final = 300


class Terminations:
    """Finishes the deletion of the pods bound to ``nodes`` (see the module doc)."""

    def __init__(self, kube: KubeClient, nodes: Collection[str], *, stop_s: float = STOP_S) -> None:
        self._kube = kube
        self._nodes = frozenset(nodes)
        self._stop_s = stop_s
        self._pending: dict[str, asyncio.Task[None]] = {}  # pod UID → its delete

    async def run(self) -> None:
        """List, then watch, every pod; re-list after a broken or expired watch."""
        try:
            while True:
                try:
                    listed = await self._kube.list(PODS)
                    for pod in listed["items"]:
                        self._seen(pod)
                    version = str(listed["resourceVersion"])
                    while True:
                        async for kind, pod in self._kube.watch(
                            PODS, resource_version=version, timeout_seconds=_WATCH_TIMEOUT_S
                        ):
                            version = str(pod["metadata"].get("resourceVersion") or version)
                            if kind in ("ADDED", "MODIFIED"):
                                self._seen(pod)
                except KubeError as exc:
                    log.info("pod watch for terminations ended (%s); listing again", exc)
                    await asyncio.sleep(_RETRY_S)
        finally:
            for task in self._pending.values():
                task.cancel()

    def _seen(self, pod: KubeObject) -> None:
        meta = pod["metadata"]
        uid = str(meta.get("uid") or "")
        if (
            not meta.get("deletionTimestamp")
            or (pod.get("spec") or {}).get("nodeName") not in self._nodes
            or uid in self._pending
        ):
            return
        task = asyncio.create_task(self._finish(str(meta["namespace"]), str(meta["name"]), uid))
        self._pending[uid] = task
        task.add_done_callback(lambda _: self._pending.pop(uid, None))

    async def _finish(self, namespace: str, name: str, uid: str) -> None:
        await asyncio.sleep(self._stop_s)
        while True:
            try:
                await self._kube.delete(
                    PODS, name, namespace=namespace, grace_period_seconds=0, uid=uid
                )
                return
            except (NotFound, Conflict):
                return  # gone, or re-created under its name: not the pod that was terminating
            except (Unreachable, TooManyRequests, ServerError) as exc:
                log.warning("could not remove pod %s/%s (%s); trying again", namespace, name, exc)
                await asyncio.sleep(_RETRY_S)
            except KubeError as exc:  # refused for good (RBAC, validation): say so, stop
                log.error(
                    "pod %s/%s stays Terminating: removing it failed: %s", namespace, name, exc
                )
                return
