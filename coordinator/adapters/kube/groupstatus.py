"""PodGroup status written where users look: ``kubectl get podgroups`` shows each gang's phase.

:class:`PodGroupStatusWriter` keeps the status of the PodGroup objects of this coordinator's
gangs current, through their ``status`` subresource:

* scheduler-plugins ``PodGroup`` (``scheduling.x-k8s.io/v1alpha1``): ``phase``, ``scheduled``,
  ``running``, ``succeeded``, ``failed``, ``scheduleStartTime`` and the ``PodGroupScheduled``
  condition, from the member pods (a watch of pods labelled ``scheduling.x-k8s.io/pod-group``)
  and the gang manager's message;
* the Workload API's ``PodGroup`` (``scheduling.k8s.io/v1alpha2``): its ``PodGroupScheduled``
  condition as kube-scheduler writes it (``Scheduled``; ``Unschedulable`` with the reason), and,
  as there, never turned back to False once True.

A group is ours once one of its members names this scheduler. Every ``interval_s`` the wanted
status is compared with the object as last seen and with what was last written: only a
difference is written (a merge patch of the changed fields), so a steady gang costs no request.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from common import podkeys
from common.kube import POD_GROUPS, PODS, KubeClient, KubeError, KubeObject, NotFound, Resource
from coordinator.adapters.kube.objects import WORKLOAD_POD_GROUPS
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.core.gangs.groupstatus import (
    MemberCounts,
    Scheduled,
    group_phase,
    scheduled_condition,
    with_condition,
)
from coordinator.core.gangs.manager import GangStatus
from coordinator.inventory.state import BoundPod

log = logging.getLogger(__name__)

__all__ = ["MemberPods", "PodGroupStatusWriter", "now_text"]

Key = tuple[str, str]
_GROUP_LABEL: Final = podkeys.POD_GROUP_X_K8S.canonical


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class _Member:
    group: Key
    scheduler: str
    node: str
    phase: str


def _labelled_group(meta: Mapping[str, Any]) -> str | None:
    group = (meta.get("labels") or {}).get(_GROUP_LABEL)
    return str(group) if group else None


class MemberPods:
    """The pods of PodGroups (a reflector's handler): ``group_of(metadata)`` names a pod's group
    (the key its PodGroup has in its cache), ``None`` for a pod in none; by default the label
    ``scheduling.x-k8s.io/pod-group``."""

    def __init__(self, group_of: Callable[[Mapping[str, Any]], str | None] = _labelled_group):
        self._pods: dict[str, _Member] = {}
        self._group_of = group_of

    def _member(self, obj: KubeObject) -> tuple[str, _Member] | None:
        meta = obj.get("metadata") or {}
        group = self._group_of(meta)
        if not group:
            return None
        spec = obj.get("spec") or {}
        member = _Member(
            (str(meta.get("namespace") or "default"), group),
            str(spec.get("schedulerName") or "default-scheduler"),
            str(spec.get("nodeName") or ""),
            str((obj.get("status") or {}).get("phase") or "Pending"),
        )
        return str(meta.get("uid") or meta.get("name")), member

    def replace(self, items: list[KubeObject]) -> None:
        self._pods = dict(m for m in map(self._member, items) if m is not None)

    def apply(self, kind: Change, obj: KubeObject) -> None:
        found = self._member(obj)
        if found is None:
            return
        uid, member = found
        if kind == "DELETED":
            self._pods.pop(uid, None)
        else:
            self._pods[uid] = member

    def counts(self, schedulers: Collection[str]) -> tuple[dict[Key, MemberCounts], set[Key]]:
        """Counts by group, and the groups with a member that names one of ``schedulers``."""
        raw: dict[Key, list[int]] = {}
        ours: set[Key] = set()
        for m in self._pods.values():
            n = raw.setdefault(m.group, [0, 0, 0, 0, 0])
            n[0] += 1
            n[1] += bool(m.node)
            n[2] += m.phase == "Running"
            n[3] += m.phase == "Succeeded"
            n[4] += m.phase == "Failed"
            if m.scheduler in schedulers:
                ours.add(m.group)
        return {k: MemberCounts(*v) for k, v in raw.items()}, ours


def _meta(obj: Mapping[str, Any]) -> tuple[Key, str, int | None]:
    meta = obj.get("metadata") or {}
    generation = meta.get("generation")
    return (
        (str(meta.get("namespace") or "default"), str(meta.get("name") or "")),
        str(meta.get("uid") or ""),
        generation if isinstance(generation, int) else None,
    )


class PodGroupStatusWriter:
    """Event-loop only. ``feeds`` (the member-pod watch and the writing loop) run as long as the
    gangs do; ``gangs`` are the gang manager's statuses now; ``bound`` the bound pods now."""

    def __init__(
        self,
        client: KubeClient,
        *,
        podgroups: Mapping[Key, KubeObject],
        workload_groups: Mapping[Key, KubeObject],
        gangs: Callable[[], Iterable[GangStatus]],
        bound: Callable[[], Iterable[BoundPod]],
        scheduler_name: str | Collection[str] = podkeys.SCHEDULER_NAME,
        namespace: str | None = None,
        interval_s: float = 1.0,
        now: Callable[[], str] = now_text,
        started: asyncio.Event | None = None,
        active: Callable[[], bool] = lambda: True,
    ) -> None:
        """``started``: writing begins once it is set (the scheduler runs); ``active``: checked
        before every pass (only the leader writes)."""
        self._client = client
        self._podgroups = podgroups
        self._workload_groups = workload_groups
        self._gangs = gangs
        self._bound = bound
        #: Every profile's name: a group is ours once a member names one.
        self._schedulers = frozenset(
            (scheduler_name,) if isinstance(scheduler_name, str) else scheduler_name
        )
        self._interval_s = interval_s
        self._now = now
        self._started = started
        self._active = active
        self.members = MemberPods()
        self.watch = Reflector(
            client,
            PODS,
            self.members,
            namespace=namespace,
            label_selector=_GROUP_LABEL,
            what="PodGroup member pods",
        )
        self._written: dict[tuple[str, Key], tuple[str, dict[str, Any]]] = {}
        self.writes = 0

    @property
    def feeds(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        return [self.watch.run, self.run]

    async def run(self) -> None:
        await self.watch.synced.wait()
        if self._started is not None:
            await self._started.wait()
        while True:
            try:
                if self._active():
                    await self.sync()
            except Exception:
                log.exception("writing PodGroup status failed")
            await asyncio.sleep(self._interval_s)

    async def sync(self) -> None:
        """Write every status that differs from what it should say."""
        gangs = {(s.namespace, s.name, s.source): s for s in self._gangs()}
        counts, ours = self.members.counts(self._schedulers)
        for obj in list(self._podgroups.values()):
            key, uid, generation = _meta(obj)
            if key not in ours and ("x", key) not in self._written:
                continue
            gang = gangs.get((*key, "podgroup"))
            want = self._plugins_status(obj, counts.get(key, MemberCounts()), gang, generation)
            if want is not None:
                await self._write(POD_GROUPS, "x", key, uid, want)
        # Counted only when there is a group to write (a walk of every bound pod).
        bound = self._bound_by_group() if self._workload_groups else {}
        for obj in list(self._workload_groups.values()):
            key, uid, generation = _meta(obj)
            gang = gangs.get((*key, "workload"))
            n_bound = max(bound.get(key, 0), gang.bound if gang is not None else 0)
            if gang is None and not n_bound:
                continue
            want = self._workload_status(obj, n_bound, gang, generation)
            if want is not None:
                await self._write(WORKLOAD_POD_GROUPS, "w", key, uid, want)
        present = {("x", k) for k in self._podgroups} | {
            ("w", _meta(o)[0]) for o in self._workload_groups.values()
        }
        for gone in self._written.keys() - present:
            del self._written[gone]

    def _bound_by_group(self) -> dict[Key, int]:
        out: dict[Key, int] = {}
        for pod in self._bound():
            if pod.scheduling_group and pod.scheduler in self._schedulers:
                key = (pod.namespace, pod.scheduling_group)
                out[key] = out.get(key, 0) + 1
        return out

    def _plugins_status(
        self,
        obj: Mapping[str, Any],
        n: MemberCounts,
        gang: GangStatus | None,
        generation: int | None,
    ) -> dict[str, Any] | None:
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        min_member = spec.get("minMember")
        if isinstance(min_member, bool) or not isinstance(min_member, int) or min_member < 1:
            return None  # the gang step reports the bad object on every member
        want: dict[str, Any] = {
            "phase": group_phase(min_member, n),
            "scheduled": n.scheduled,
            "running": n.running,
            "succeeded": n.succeeded,
            "failed": n.failed,
        }
        if want["phase"] != "Pending" and not status.get("scheduleStartTime"):
            want["scheduleStartTime"] = self._now()
        condition = self._condition(min_member, n.scheduled, gang)
        if condition is None and n.scheduled < min_member:  # the gang's members are all gone
            waiting = f"{n.pods} of {min_member} members exist"
            condition = scheduled_condition(min_member, n.scheduled, waiting)
        if condition is not None:
            conditions = with_condition(
                status.get("conditions") or [], condition, now=self._now(), generation=generation
            )
            if conditions is not None:
                want["conditions"] = conditions
        changed = {k: v for k, v in want.items() if status.get(k) != v}
        return changed or None

    def _workload_status(
        self,
        obj: Mapping[str, Any],
        n_bound: int,
        gang: GangStatus | None,
        generation: int | None,
    ) -> dict[str, Any] | None:
        spec = obj.get("spec") or {}
        gang_policy = (spec.get("schedulingPolicy") or {}).get("gang") or {}
        min_member = gang_policy.get("minCount") if isinstance(gang_policy, Mapping) else None
        if isinstance(min_member, bool) or not isinstance(min_member, int) or min_member < 1:
            return None
        conditions = (obj.get("status") or {}).get("conditions") or []
        condition = self._condition(min_member, n_bound, gang)
        if condition is None:
            return None
        if not condition.status and any(
            c.get("type") == "PodGroupScheduled" and c.get("status") == "True" for c in conditions
        ):
            return None  # as kube-scheduler: a scheduled group never goes back to False
        out = with_condition(conditions, condition, now=self._now(), generation=generation)
        return None if out is None else {"conditions": out}

    @staticmethod
    def _condition(min_member: int, bound: int, gang: GangStatus | None) -> Scheduled | None:
        waiting = gang.message if gang is not None and gang.phase != "Bound" else None
        return scheduled_condition(min_member, bound, waiting)

    async def _write(
        self, resource: Resource, kind: str, key: Key, uid: str, want: dict[str, Any]
    ) -> None:
        last = self._written.get((kind, key))
        if last is not None and last == (uid, want):
            return  # written already; the watch has not shown it yet
        try:
            await self._client.patch(
                resource, key[1], {"status": want}, namespace=key[0], subresource="status"
            )
        except NotFound:
            self._written.pop((kind, key), None)
            return
        except KubeError as exc:
            log.warning("status of PodGroup %s/%s: %s", key[0], key[1], exc)
            return
        self.writes += 1
        self._written[(kind, key)] = (uid, want)
