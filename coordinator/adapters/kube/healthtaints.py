"""Topos's health verdicts written as DRA device taints: :class:`HealthTaintWriter`.

It keeps one ``DeviceTaintRule`` (``resource.k8s.io/v1beta2``) per DRA device standing for a GPU
the inventory holds unhealthy, and deletes it when the GPU is healthy again; which rules, and what
they say, is :mod:`coordinator.core.dra.healthtaints`. Only rules labelled
``app.kubernetes.io/managed-by: topos`` are ever changed or deleted. A round runs after an agent's
report or a Node changes, after a ResourceSlice or DeviceTaintRule changes, and at least every
``interval_s``; it writes only while ``active()`` holds (the scheduler has listed everything and
this replica leads), so a new leader reconciles on its first round: it deletes stale rules and
creates missing ones. Where the API server does not serve DeviceTaintRules (the
``DRADeviceTaintRules`` gate off) it says so once in the log and writes nothing; it asks again
every ``probe_s`` without a word.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from common.kube import DEVICE_TAINT_RULES, AlreadyExists, KubeClient, KubeError, NotFound
from common.waiting import wait_set
from coordinator.core.dra.healthtaints import (
    UnhealthyGpu,
    owned,
    plan,
    short_reason,
    wanted_taints,
)
from coordinator.inventory.dra import DraChange, DraStore
from coordinator.inventory.store import Inventory, InventoryEvent

log = logging.getLogger(__name__)

__all__ = ["NOT_SERVED", "HealthTaintWriter"]

NOT_SERVED: Final = (
    "the API server does not serve DeviceTaintRules (resource.k8s.io/v1beta2; the "
    "DRADeviceTaintRules feature gate is off): unhealthy GPUs are not published as DRA device "
    "taints; Topos itself still keeps them from pods"
)


class HealthTaintWriter:
    """Event-loop only; run :meth:`run` as a task."""

    def __init__(
        self,
        client: KubeClient,
        inventory: Inventory,
        dra: DraStore,
        *,
        effect: str = "NoSchedule",
        active: Callable[[], bool] = lambda: True,
        interval_s: float = 10.0,
        probe_s: float = 300.0,
        settle_s: float = 0.2,
    ) -> None:
        self.client = client
        self.inventory = inventory
        self.dra = dra
        self.effect = effect
        self.active = active
        self.interval_s = interval_s
        self.probe_s = probe_s
        self.settle_s = settle_s
        #: Why nothing is written (the API not served), else ``None``.
        self.idle: str | None = None
        self._probed_at: float | None = None
        self._wake = asyncio.Event()
        self._dirty: set[str] = set(inventory.names())
        self._sick: dict[str, tuple[UnhealthyGpu, ...]] = {}
        #: Our writes the watch has not shown yet: name → the object written (``None``: deleted).
        self._written: dict[str, Mapping[str, Any] | None] = {}
        self._said: set[str] = set()

    # --- triggers -------------------------------------------------------------------------------

    def _on_inventory(self, event: InventoryEvent) -> None:
        if not event.pods_only:
            self._dirty.add(event.node)
            self._wake.set()

    def _on_dra(self, change: DraChange) -> None:
        if change.kind in ("ResourceSlice", "DeviceTaintRule"):
            self._wake.set()

    async def run(self) -> None:
        unsubscribe = (
            self.inventory.subscribe(self._on_inventory),
            self.dra.subscribe(self._on_dra),
        )
        try:
            while True:
                await wait_set(self._wake, self.interval_s)
                self._wake.clear()
                try:
                    await self.round()
                except KubeError as exc:
                    self._say(f"DeviceTaintRules not reconciled: {exc}")
                await asyncio.sleep(self.settle_s)  # a burst of reports is one round
        finally:
            for stop in unsubscribe:
                stop()

    # --- one round ------------------------------------------------------------------------------

    def unhealthy(self) -> list[UnhealthyGpu]:
        """The GPUs the inventory holds unhealthy now (nodes re-read when they changed)."""
        for name in self._dirty:
            node = self.inventory.scheduling_node(name)
            gpus: tuple[UnhealthyGpu, ...] = ()
            if node is not None and node.topology is not None:
                gpus = tuple(
                    UnhealthyGpu(name, g.uuid, short_reason(g), labels=node.labels)
                    for g in node.topology.gpus
                    if not g.healthy
                )
            if gpus:
                self._sick[name] = gpus
            else:
                self._sick.pop(name, None)
        self._dirty.clear()
        return [g for gpus in self._sick.values() for g in gpus]

    def existing(self) -> list[Mapping[str, Any]]:
        """Every DeviceTaintRule as the watch shows it, with our writes it has not shown yet."""
        seen = self.dra.objects("DeviceTaintRule")
        for name, written in tuple(self._written.items()):
            now = seen.get(name)
            if (written is None and now is None) or (
                written is not None and now is not None and _same(now, written)
            ):
                del self._written[name]  # the watch caught up
        out = {n: o for n, o in seen.items() if n not in self._written}
        out.update({n: o for n, o in self._written.items() if o is not None})
        return list(out.values())

    async def _served(self) -> bool:
        loop = asyncio.get_running_loop()
        last = self._probed_at
        if self.idle is not None and last is not None and loop.time() - last < self.probe_s:
            return False
        self._probed_at = loop.time()
        try:
            await self.client.list(DEVICE_TAINT_RULES, limit=1)
        except NotFound:
            if self.idle is None:
                self.idle = NOT_SERVED
                log.warning(NOT_SERVED)
            return False
        if self.idle is not None:
            log.info("the API server serves DeviceTaintRules now: unhealthy GPUs are published")
            self.idle = None
        return True

    async def round(self) -> None:
        """Make Topos's DeviceTaintRules the wanted ones (only while active)."""
        sick = self.unhealthy()
        if not self.active():
            return
        if (self.idle is not None or self._probed_at is None) and not await self._served():
            return
        todo = plan(wanted_taints(self.dra.state(), sick, self.effect), self.existing())
        for obj in todo.create:
            await self._create(obj)
        for obj in todo.update:
            name = obj["metadata"]["name"]
            with contextlib.suppress(NotFound):  # deleted meanwhile: created next round
                await self.client.replace(DEVICE_TAINT_RULES, name, obj)
                self._written[name] = obj
                log.info("DeviceTaintRule %s updated: %s", name, _says(obj))
        for name in todo.delete:
            with contextlib.suppress(NotFound):
                await self.client.delete(DEVICE_TAINT_RULES, name)
                log.info("DeviceTaintRule %s deleted: its device is healthy again", name)
            self._written[name] = None

    async def _create(self, obj: Mapping[str, Any]) -> None:
        name = obj["metadata"]["name"]
        try:
            await self.client.create(DEVICE_TAINT_RULES, obj)
        except AlreadyExists:
            there = self.dra.objects("DeviceTaintRule").get(name)
            if there is not None and not owned(there):
                self._say(
                    f"DeviceTaintRule {name} exists and is not Topos's (no "
                    f"app.kubernetes.io/managed-by: topos): {_says(obj)} is not published"
                )
            return  # ours, the watch has not shown it yet
        except NotFound:  # the API went away (the gate turned off)
            self.idle = NOT_SERVED
            log.warning(NOT_SERVED)
            return
        self._written[name] = obj
        log.info("DeviceTaintRule %s created: %s", name, _says(obj))

    def _say(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            log.warning("%s", message)


def _same(seen: Mapping[str, Any], written: Mapping[str, Any]) -> bool:
    """Does the watched rule say what we wrote (the server adds ``taint.timeAdded``)?"""
    a, b = seen.get("spec") or {}, written["spec"]
    taint = a.get("taint") or {}
    return a.get("deviceSelector") == b["deviceSelector"] and all(
        taint.get(k) == b["taint"][k] for k in ("key", "value", "effect")
    )


def _says(obj: Mapping[str, Any]) -> str:
    selector, taint = obj["spec"]["deviceSelector"], obj["spec"]["taint"]
    device = "/".join(selector[k] for k in ("driver", "pool", "device"))
    return f"device {device} {taint['key']}={taint['value']}:{taint['effect']}"
