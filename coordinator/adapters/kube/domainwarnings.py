"""Warning Events on NVIDIA ComputeDomains that placement cannot read.

A ComputeDomain whose ``spec`` Topos refuses (a negative or non-integer ``spec.numNodes``:
:mod:`coordinator.core.dra.computedomains`) is left out of placement — its pods are placed as
those of a domain whose size is unknown — logged and counted (``topos_dra_rejected_objects``).
:class:`ComputeDomainWarnings` also posts a Warning Event ``InvalidComputeDomain`` on the
ComputeDomain itself, naming the field and the value, so that ``kubectl describe computedomain``
shows it: once per distinct problem (a domain that stays bad is not told again; one fixed and
broken again is), written off the watch's call.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from common.kube import COMPUTE_DOMAINS, KubeError
from common.kube.recorder import EventRecorder
from common.kube.types import ObjectReference
from coordinator.engine.ports import COMPONENT
from coordinator.inventory.dra import DraChange, DraStore

log = logging.getLogger(__name__)

__all__ = ["REASON", "ComputeDomainWarnings"]

REASON: Final = "InvalidComputeDomain"


class ComputeDomainWarnings:
    """A :meth:`DraStore.subscribe` listener; event-loop only."""

    def __init__(self, store: DraStore, events: EventRecorder, *, instance: str = "") -> None:
        self._store = store
        self._events = events
        self._instance = instance
        self._said: dict[str, str] = {}  # ComputeDomain key → the problem last told
        self._writes: set[asyncio.Task[None]] = set()

    def __call__(self, change: DraChange) -> None:
        if change.kind != "ComputeDomain":
            return
        error = self._store.errors.get(("ComputeDomain", change.key))
        if change.obj is None or error is None:
            self._said.pop(change.key, None)
            return
        if self._said.get(change.key) == error.message:
            return
        self._said[change.key] = error.message
        meta = change.obj.get("metadata") or {}
        regarding: ObjectReference = {
            "apiVersion": COMPUTE_DOMAINS.api_version,
            "kind": "ComputeDomain",
            "name": str(meta.get("name") or ""),
            "namespace": str(meta.get("namespace") or "default"),
        }
        if meta.get("uid"):
            regarding["uid"] = str(meta["uid"])
        message = (
            f"{error.message}; Topos places this ComputeDomain's pods as those of a domain "
            "whose size is unknown"
        )
        task = asyncio.get_running_loop().create_task(self._post(regarding, message))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _post(self, regarding: ObjectReference, message: str) -> None:
        try:
            await self._events.record(
                regarding,
                reason=REASON,
                message=message,
                event_type="Warning",
                component=COMPONENT,
                instance=self._instance,
            )
        except KubeError as exc:  # the problem is still in the log and the metric
            log.info("no %s Event about %s: %s", REASON, regarding["name"], exc)
