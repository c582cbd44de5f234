"""One Warning Event per pod the node gave other GPUs than Topos chose.

The inventory says, per node, which pods Topos placed hold other devices than it assigned
(:mod:`coordinator.inventory.mismatch`, from the agent's PodResources report). The
:class:`MismatchReporter` turns each *new or changed* mismatch into one ``GPUAssignmentMismatch``
Warning Event on the pod — not one per agent report: a pod's mismatch is remembered, by UID,
with the devices it was given, until the pod leaves the node. ``on_reported`` is called once per
Event written (the coordinator counts them in ``topos_gpu_assignment_mismatches_total``).

It wakes on changes to nodes whose agent reports which devices pods hold, or where it reported
a mismatch (and every ``resync_s`` anyway): no other node can have one, and a node without an
agent (KWOK's, a CPU node) changes with every pod bound there. It writes only while
``active()`` — the leader, once scheduling has started — so a standby replica writes nothing. A
new leader reports once more the mismatches it finds; an Event that failed to be written is
tried again on the next pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from coordinator.engine.ports import ClusterError, ClusterWriter, PodRef
from coordinator.inventory.mismatch import GpuMismatch
from coordinator.inventory.store import Inventory, InventoryEvent

__all__ = ["REASON_MISMATCH", "MismatchReporter", "mismatch_event_message"]

log = logging.getLogger(__name__)

REASON_MISMATCH: Final = "GPUAssignmentMismatch"
_RESYNC_S: Final = 10.0

Reported = Callable[[str, GpuMismatch], None]


def mismatch_event_message(node: str, mismatch: GpuMismatch) -> str:
    """The Event's text: both sets, their link classes, and why it happened."""
    return (
        f"{mismatch.message} on node {node}: the device plugin picked the devices itself, so "
        "Topos's choice was advice here (DRA enforces it; see docs/enforcement.md)"
    )


class MismatchReporter:
    """Writes a ``GPUAssignmentMismatch`` Event per new or changed mismatch through ``writer``."""

    def __init__(
        self,
        inventory: Inventory,
        writer: ClusterWriter,
        *,
        active: Callable[[], bool] = lambda: True,
        on_reported: Reported | None = None,
        resync_s: float = _RESYNC_S,
    ) -> None:
        self._inventory = inventory
        self._writer = writer
        self._active = active
        self._on_reported = on_reported
        self._resync_s = resync_s
        self._reported: dict[str, tuple[str, frozenset[str]]] = {}  # uid -> (node, given)
        self._reported_on: set[str] = set()  # the nodes of ``_reported``
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()

    def _changed(self, event: InventoryEvent) -> None:
        node = event.node
        if node in self._dirty:
            return
        if self._inventory.reports_holdings(node) or node in self._reported_on:
            self._dirty.add(node)
            self._wake.set()

    async def run(self) -> None:
        """Until cancelled: check changed nodes as they change, every node every ``resync_s``."""
        unsubscribe = self._inventory.subscribe(self._changed)
        try:
            nodes = self._inventory.names()
            while True:
                await self.check(nodes)
                try:
                    async with asyncio.timeout(self._resync_s):
                        await self._wake.wait()
                    nodes = sorted(self._dirty)
                except TimeoutError:
                    nodes = self._inventory.names()
                self._wake.clear()
                self._dirty = set()
        finally:
            unsubscribe()

    async def check(self, nodes: list[str]) -> int:
        """Write the Events due on ``nodes``; returns how many were written."""
        if not self._active():
            return 0
        written = 0
        for node in nodes:
            if node not in self._reported_on and not self._inventory.reports_holdings(node):
                continue  # nothing reported of it, nothing the kubelet says: no mismatch
            state = self._inventory.node(node)
            here = {p.uid for p in self._inventory.bound_pods(node)}
            for uid in [u for u, (n, _) in self._reported.items() if n == node and u not in here]:
                del self._reported[uid]  # the pod left the node: a new mismatch is news again
            for mismatch in () if state is None else state.mismatches:
                seen = (node, frozenset(mismatch.given))
                if self._reported.get(mismatch.uid) == seen:
                    continue
                if await self._write(node, mismatch):
                    self._reported[mismatch.uid] = seen
                    written += 1
        self._reported_on = {n for n, _ in self._reported.values()}
        return written

    async def _write(self, node: str, mismatch: GpuMismatch) -> bool:
        pod = PodRef(mismatch.namespace, mismatch.pod, mismatch.uid)
        message = mismatch_event_message(node, mismatch)
        if mismatch.unknown:
            log.warning("pod %s on node %s: %s", pod.key, node, mismatch.message)
        try:
            await self._writer.event(
                pod, reason=REASON_MISMATCH, message=message, event_type="Warning"
            )
        except ClusterError as exc:
            log.warning("GPU mismatch of %s not reported yet: %s", pod.key, exc)
            return False
        log.info("pod %s: %s", pod.key, message)
        if self._on_reported is not None:
            self._on_reported(node, mismatch)
        return True
