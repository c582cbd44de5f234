"""Kueue's AdmissionCheck API on the API server, for the placement check Topos answers
(``controllerName: topos.io/placement``; the decision is
:mod:`coordinator.engine.admission.placement`).

- Every AdmissionCheck naming the controller gets the condition ``Active``: ``True`` (reason
  ``Active``), or ``False`` with reason ``UnknownParameters`` when it names ``parameters`` — Topos
  takes none, and the message names the object it was given — or with reason
  ``InvalidBindDeadline`` when its annotation ``topos.io/bind-deadline-seconds`` (how long a Ready
  workload's pods may take to be bound; default 300) is not a whole number of seconds ≥ 1.
- Every Workload (``kueue.x-k8s.io/v1beta2``, the storage version of Kueue v0.17) with such a
  check in state ``Pending`` and its quota reserved is decided; the check's ``state``, ``message``
  and ``podSetUpdates`` are written with a JSON patch guarded by the Workload's
  ``resourceVersion`` (another writer in between: decided again on the next round). The
  workload's pods are decided with the keys its controller (the JobSet, Job… the Workload's
  ``ownerReferences`` name) passes on to them, read from the backend's caches
  (``controller``); while that object is not cached yet the workload waits for the next round.
- A Kueue ``Topology`` whose level names a node label none of Topos's nodes has gets a Warning
  Event (reason ``UnknownNodeLabel``) naming the label, once.
- A Ready check whose workload is admitted but whose room is not held (a restarted coordinator)
  gets it held again from its ``podSetUpdates``, less the pods already bound; a reservation whose
  workload is gone, finished, or no longer holds its quota (Kueue evicted it) is released.
- A Ready check whose room is lost before its pods are bound (a node it is held on deleted,
  cordoned, not Ready, its agent silent), or whose pods are not all bound within the bind deadline
  after Ready, is answered ``Retry`` and its room released: Kueue evicts the workload (reason
  ``AdmissionCheck``), releases its quota, queues it again and resets the check to ``Pending``.

Rounds run on every Workload change (a watch) and at least every ``interval_s`` (the cluster
changes too). A Pending check is decided again only when its Workload or the cluster changed
since (an inventory change, a nomination or reservation made or ended, an assumed pod released),
or ``recheck_s`` passed: a round in a quiet cluster runs no placement. Kueue not installed (the
API not served): the controller says so once in the log and stays idle; scheduling goes on as
before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from common.kube import KubeClient, KubeError, NotFound, Resource
from common.waiting import wait_set
from coordinator.engine.admission.placement import (
    CONTROLLER_NAME,
    PLACEMENT_GROUP,
    ControllerKeys,
    controller,
    controller_keys,
    decide,
    group_of,
    nodes_from_updates,
    pod_set_updates,
    reserve,
    reserve_from_updates,
    room_lost,
)
from coordinator.engine.gangs.running import bound_pods
from coordinator.engine.loop import Scheduler
from coordinator.engine.whatif.service import WhatIf

log = logging.getLogger(__name__)

__all__ = [
    "ADMISSION_CHECKS",
    "BIND_DEADLINE",
    "DEFAULT_BIND_DEADLINE_S",
    "WORKLOADS",
    "PlacementCheckController",
    "active_condition",
]

ADMISSION_CHECKS: Final = Resource(
    "kueue.x-k8s.io", "v1beta2", "admissionchecks", False, "AdmissionCheck"
)
WORKLOADS: Final = Resource("kueue.x-k8s.io", "v1beta2", "workloads", True, "Workload")
TOPOLOGIES: Final = Resource("kueue.x-k8s.io", "v1beta2", "topologies", False, "Topology")
BIND_DEADLINE: Final = "topos.io/bind-deadline-seconds"
DEFAULT_BIND_DEADLINE_S: Final = 300
IDLE: Final = (
    "Kueue's AdmissionCheck API (kueue.x-k8s.io/v1beta2) is not served: the placement "
    "admission check (topos.io/placement) is idle; scheduling is unaffected"
)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _since(stamp: object, wall: float) -> float | None:
    """Seconds from the API timestamp ``stamp`` to ``wall`` (``None``: no timestamp)."""
    try:
        then = datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return wall - then.timestamp()


def bind_deadline(check: Mapping[str, Any]) -> int | str:
    """The check's bind deadline in seconds, or the error naming the annotation and value."""
    raw = ((check.get("metadata") or {}).get("annotations") or {}).get(BIND_DEADLINE)
    if raw is None:
        return DEFAULT_BIND_DEADLINE_S
    text = str(raw).strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        return (
            f"annotation {BIND_DEADLINE}: {raw!r} is not a whole number of seconds ≥ 1 "
            f"(the default is {DEFAULT_BIND_DEADLINE_S})"
        )
    return int(text)


def _true(obj: Mapping[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def active_condition(check: Mapping[str, Any]) -> dict[str, str]:
    """The ``Active`` condition Topos writes on an AdmissionCheck of its controller."""
    parameters = (check.get("spec") or {}).get("parameters")
    if parameters:
        named = "/".join(
            str(parameters.get(k, "")) for k in ("apiGroup", "kind", "name") if parameters.get(k)
        )
        return {
            "type": "Active",
            "status": "False",
            "reason": "UnknownParameters",
            "message": f"{CONTROLLER_NAME} takes no parameters; spec.parameters names {named}, "
            "which Topos does not know",
        }
    deadline = bind_deadline(check)
    if isinstance(deadline, str):
        return {
            "type": "Active",
            "status": "False",
            "reason": "InvalidBindDeadline",
            "message": f"{CONTROLLER_NAME}: {deadline}",
        }
    return {
        "type": "Active",
        "status": "True",
        "reason": "Active",
        "message": "Topos answers this check: can the whole workload be placed now",
    }


class PlacementCheckController:
    """Event-loop only. ``whatif()``: the running scheduler's what-if (``None``: not running)."""

    def __init__(
        self,
        client: KubeClient,
        scheduler: Scheduler,
        whatif: Callable[[], WhatIf | None],
        *,
        namespace: str | None = None,
        interval_s: float = 2.0,
        recheck_s: float = 30.0,
        synced: asyncio.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        controllers: Callable[[str, str, str, str], Mapping[str, Any] | bool | None] = (
            lambda *_: None
        ),
    ) -> None:
        self.client = client
        self.controllers = controllers
        self.scheduler = scheduler
        self.whatif = whatif
        self.namespace = namespace
        self.interval_s = interval_s
        self.recheck_s = recheck_s
        self._clock = clock
        self._wall = wall
        self.retries = 0  # Retry answers written
        self.idle: str | None = None
        self.rounds = 0
        self.synced = synced
        self._told: set[tuple[str, str]] = set()  # (Topology uid, label) already reported
        self._inventory_changes = 0
        #: group → (its Workload's resourceVersion, the cluster's state, when): its last Pending
        #: decision, not made again while neither changed (see :meth:`_unchanged`)
        self._asked: dict[str, tuple[str, tuple[int, ...], float]] = {}
        self.decisions = 0  # placements run (a Pending check asked again counts each time)
        #: Set after the first round (or once idle): room Ready checks hold is held again before
        #: the scheduler starts (the app adds it to the scheduler's gates).
        self.ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="placement-check")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            self.ready.set()

    async def _run(self) -> None:
        if self.synced is not None:
            await self.synced.wait()  # bound pods known: what a restored reservation leaves out
        try:
            await self.client.list(ADMISSION_CHECKS, limit=1)
        except NotFound:
            self.idle = IDLE
            log.warning(IDLE)
            return
        except KubeError as exc:
            log.warning("placement check: %s; not answering", exc)
            return
        wake = asyncio.Event()
        watcher = asyncio.create_task(self._watch(wake), name="placement-check-watch")
        unsubscribe = self.scheduler.inventory.subscribe(self._on_inventory)
        try:
            while True:
                try:
                    await self.round()
                except KubeError as exc:
                    log.warning("placement check: %s", exc)
                self.ready.set()
                await wait_set(wake, self.interval_s)
                wake.clear()
        finally:
            unsubscribe()
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    def _on_inventory(self, _: object) -> None:
        self._inventory_changes += 1

    def _cluster_state(self) -> tuple[int, ...]:
        """What a placement decision reads, as counts that move when it changes."""
        nominations = self.scheduler.nominations
        return (
            self._inventory_changes,
            len(nominations),
            sum(len(nominations.reserved(g)) for g in nominations.groups()),
            self.scheduler.view.assumed_count,
        )

    def _unchanged(self, workload: Mapping[str, Any]) -> bool:
        """``workload``'s last decision (Pending) still stands: neither it nor the cluster
        changed since, and it was made less than ``recheck_s`` ago."""
        asked = self._asked.get(group_of(workload))
        return (
            asked is not None
            and asked[0] == str(workload["metadata"].get("resourceVersion"))
            and asked[1] == self._cluster_state()
            and self._clock() - asked[2] < self.recheck_s
        )

    async def _watch(self, wake: asyncio.Event) -> None:
        while True:
            try:
                listed = await self.client.list(WORKLOADS, namespace=self.namespace, limit=1)
                version = str(listed["resourceVersion"])
                async for _ in self.client.watch(
                    WORKLOADS,
                    namespace=self.namespace,
                    resource_version=version,
                    timeout_seconds=60,
                ):
                    wake.set()
            except KubeError:
                await asyncio.sleep(1.0)

    async def round(self) -> None:
        """Each check's Active condition, then each workload that waits on one of them."""
        if not self.scheduler.leadership.is_leader():
            return  # only the leader decides and writes (a follower's first round passes)
        self.rounds += 1
        checks = (await self.client.list(ADMISSION_CHECKS))["items"]
        ours: dict[str, int] = {}  # active check → its bind deadline (s)
        for check in checks:
            if (check.get("spec") or {}).get("controllerName") != CONTROLLER_NAME:
                continue
            name = str(check["metadata"]["name"])
            condition = active_condition(check)
            deadline = bind_deadline(check)
            if condition["status"] == "True" and isinstance(deadline, int):
                ours[name] = deadline
            await self._set_active(check, condition)
        workloads = (await self.client.list(WORKLOADS, namespace=self.namespace))["items"]
        nominations = self.scheduler.nominations
        live: set[str] = set()
        for workload in workloads:
            group = group_of(workload)
            entries = [
                (i, c)
                for i, c in enumerate((workload.get("status") or {}).get("admissionChecks") or [])
                if c.get("name") in ours
            ]
            if not entries:
                continue
            reserved = (
                _true(workload, "QuotaReserved")
                and not _true(workload, "Finished")
                and not _true(workload, "Evicted")  # its check is reset by Kueue: not ours to ask
            )
            if reserved:
                live.add(group)
            for index, check in entries:
                state = check.get("state")
                if state == "Pending" and reserved:
                    if not self._unchanged(workload):
                        await self._decide(workload, index, check)
                elif state == "Ready" and reserved:
                    if not nominations.reserved(group):
                        self._restore(workload, check)
                    if nominations.reserved(group):
                        why = self._lost(group, check, ours[str(check.get("name"))])
                        if why is not None:
                            await self._retry(workload, index, check, why)
        for group in nominations.groups() - live:
            nominations.release(group)
        for group in self._asked.keys() - live:
            del self._asked[group]
        await self._topologies()

    async def _topologies(self) -> None:
        """A Kueue Topology level naming a label none of Topos's nodes has: a Warning Event on
        the Topology, once per level (Kueue would find no domain there)."""
        nodes = self.scheduler.view.snapshot().nodes
        if not nodes:
            return  # nothing known yet to judge by
        present = {key for node in nodes for key in node.labels}
        for topology in (await self.client.list(TOPOLOGIES))["items"]:
            meta = topology["metadata"]
            for level in (topology.get("spec") or {}).get("levels") or []:
                label = str(level.get("nodeLabel", ""))
                told = (str(meta.get("uid", meta["name"])), label)
                if not label or label in present or told in self._told:
                    continue
                self._told.add(told)
                message = (
                    f"Topology {meta['name']}: level nodeLabel {label!r} is on none of the "
                    f"{len(nodes)} nodes Topos schedules onto; Kueue finds no domain at that level"
                )
                log.warning(message)
                await self.client.create_event(
                    regarding=topology,
                    reason="UnknownNodeLabel",
                    message=message,
                    event_type="Warning",
                    component="topos",
                    instance="topos",
                )

    async def _set_active(self, check: Mapping[str, Any], condition: dict[str, str]) -> None:
        current = {
            c.get("type"): c for c in (check.get("status") or {}).get("conditions") or []
        }.get("Active")
        same = current is not None and all(current.get(k) == v for k, v in condition.items())
        if same:
            return
        stamped = dict(
            condition,
            lastTransitionTime=_now(),
            observedGeneration=check["metadata"].get("generation", 1),
        )
        others = [
            c
            for c in (check.get("status") or {}).get("conditions") or []
            if c.get("type") != "Active"
        ]
        await self.client.patch(
            ADMISSION_CHECKS,
            str(check["metadata"]["name"]),
            {"status": {"conditions": [*others, stamped]}},
            subresource="status",
        )
        if condition["status"] != "True":
            log.warning("AdmissionCheck %s: %s", check["metadata"]["name"], condition["message"])

    async def _decide(
        self, workload: Mapping[str, Any], index: int, check: Mapping[str, Any]
    ) -> None:
        whatif = self.whatif()
        if whatif is None:
            return
        cached, keys = self._keys(workload)
        if not cached:
            return  # its JobSet / Job not in the cache yet: the next round decides
        self.decisions += 1
        group = group_of(workload)
        state = self._cluster_state()
        verdict = decide(whatif, workload, keys)
        self._asked.pop(group, None)
        version = str(workload["metadata"].get("resourceVersion"))
        if verdict.state != "Pending" or check.get("message") != verdict.message:
            updated = dict(check, state=verdict.state, message=verdict.message)
            if verdict.state == "Ready":
                updated["podSetUpdates"] = pod_set_updates(workload, verdict)
            written = await self._write(workload, index, updated)
            if written is None:
                return
            version = written
            log.info("placement check of %s: %s (%s)", group, verdict.state, verdict.message)
            if verdict.state == "Ready":
                reserve(self.scheduler.nominations, workload, verdict, keys)
        if verdict.state == "Pending":  # asked again once the workload or the cluster changes
            self._asked[group] = (version, state, self._clock())

    async def _write(
        self, workload: Mapping[str, Any], index: int, updated: Mapping[str, Any]
    ) -> str | None:
        """The Workload's resourceVersion once written; ``None``: not written."""
        meta = workload["metadata"]
        body = dict(updated, lastTransitionTime=_now())
        try:
            written = await self.client.patch(
                WORKLOADS,
                str(meta["name"]),
                [
                    {
                        "op": "test",
                        "path": "/metadata/resourceVersion",
                        "value": meta["resourceVersion"],
                    },
                    {"op": "replace", "path": f"/status/admissionChecks/{index}", "value": body},
                ],
                namespace=str(meta["namespace"]),
                patch_type="json",
                subresource="status",
            )
        except KubeError as exc:  # changed meanwhile (or gone): the next round decides again
            log.info("placement check of %s not written: %s", group_of(workload), exc)
            return None
        return str(written["metadata"]["resourceVersion"])

    def _lost(self, group: str, check: Mapping[str, Any], deadline_s: int) -> str | None:
        """Why ``group``'s Ready check can no longer be kept, or ``None``."""
        held = self.scheduler.nominations.reserved(group)
        why = room_lost(self.scheduler.view.snapshot(), held)
        if why is not None:
            return f"the room held is lost before the pods were bound: {why}"
        waited = _since(check.get("lastTransitionTime"), self._wall())
        if waited is not None and waited > deadline_s:
            return (
                f"{len(held)} pod{'s' if len(held) > 1 else ''} not bound within "
                f"{deadline_s} s of Ready ({BIND_DEADLINE})"
            )
        return None

    async def _retry(
        self, workload: Mapping[str, Any], index: int, check: Mapping[str, Any], why: str
    ) -> None:
        """Answer ``Retry``: Kueue evicts the workload, releases its quota and queues it again."""
        updated = {k: v for k, v in check.items() if k != "podSetUpdates"}
        updated.update(state="Retry", message=f"{why}; Kueue queues the workload again"[:1024])
        if await self._write(workload, index, updated) is None:
            return
        self.retries += 1
        group = group_of(workload)
        log.warning("placement check of %s: Retry (%s)", group, why)
        self.scheduler.nominations.release(group)

    def _keys(self, workload: Mapping[str, Any]) -> tuple[bool, ControllerKeys | None]:
        """Whether the workload's controller is known, and what it passes on to its pods
        (``None``: nothing — no controller, or one of a kind not watched)."""
        ref = controller(workload)
        if ref is None:
            return True, None
        namespace = str(workload["metadata"].get("namespace") or "")
        found = self.controllers(
            str(ref["kind"]), namespace, str(ref.get("name")), str(ref.get("uid"))
        )
        if found is None:
            return True, None
        if isinstance(found, bool):
            return False, None
        return True, controller_keys({**found, "kind": ref["kind"]})

    def _restore(self, workload: Mapping[str, Any], check: Mapping[str, Any]) -> None:
        """A Ready check whose room this process does not hold (it restarted): hold it again."""
        nodes = nodes_from_updates(check)
        if not nodes:
            return
        meta = workload["metadata"]
        bound: dict[str, int] = {}
        for pod in bound_pods(self.scheduler.inventory):
            if (
                pod.namespace == meta["namespace"]
                and pod.labels.get(PLACEMENT_GROUP) == meta["name"]
            ):
                bound[pod.node] = bound.get(pod.node, 0) + 1
        if sum(len(v) for v in nodes.values()) <= sum(bound.values()):
            return  # every pod is bound: nothing left to hold
        cached, keys = self._keys(workload)
        if not cached:
            return  # its controller not cached yet: held on the next round
        reserve_from_updates(self.scheduler.nominations, workload, nodes, bound, keys)
        log.info("placement check of %s: room held again after a restart", group_of(workload))
