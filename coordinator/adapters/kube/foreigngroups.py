"""Volcano's and KAI's PodGroups on Kubernetes: their caches, and their status written back.

:func:`foreign_group_caches` keeps one :class:`~.objects.ObjectCache` per kind
(``scheduling.volcano.sh/v1beta1``, ``scheduling.run.ai/v2alpha2``), keyed as the gangs read them
(:func:`~coordinator.core.gangs.foreigngroups.foreign_group_key`); a kind whose CRD is not
installed is empty and listed again every 15 s.

:class:`ForeignGroupStatusWriter` writes the status of the groups of this coordinator's gangs in
their own fields (:func:`~coordinator.core.gangs.foreigngroups.volcano_status`, ``kai_status``),
from the member pods (a watch of the pods naming a Topos profile as ``schedulerName``) and the gang
manager's message, and posts once per PodGroup the Event saying which of its fields Topos does
not honour (a queue first: Topos has no queues) — not again after a restart or a change of
leader while that Event exists. The member-pod watch starts once a Volcano or KAI PodGroup
exists: a cluster without them pays nothing for it. Volcano's CRD has no status subresource, so its
status is patched on the object; KAI's through ``status``. As for scheduler-plugins' PodGroups,
only a difference from what the object shows and from what was last written is sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping
from dataclasses import astuple
from typing import Any, Final

from common.kube import EVENTS, PODS, KubeClient, KubeError, KubeObject, NotFound, Resource
from common.kube.recorder import EventRecorder
from common.kube.types import ObjectReference
from coordinator.adapters.kube.groupstatus import MemberPods, now_text
from coordinator.adapters.kube.objects import ObjectCache, object_key
from coordinator.adapters.kube.reflector import Reflector
from coordinator.core.gangs.foreigngroups import (
    KAI,
    KINDS,
    VOLCANO,
    ForeignKind,
    foreign_group_key,
    ignored,
    kai_status,
    min_member,
    volcano_status,
)
from coordinator.core.gangs.groupstatus import MemberCounts
from coordinator.core.gangs.manager import GangStatus

log = logging.getLogger(__name__)

__all__ = ["RESOURCES", "ForeignGroupStatusWriter", "foreign_group_caches"]

Key = tuple[str, str]

#: The two PodGroup APIs, as the client addresses them.
RESOURCES: Final = {
    kind.source: Resource(kind.group, kind.version, "podgroups", namespaced=True, kind="PodGroup")
    for kind in (VOLCANO, KAI)
}
_NODE_POOL_LABEL: Final = "kai.scheduler/node-pool"


def foreign_group_caches(
    client: KubeClient,
    *,
    namespace: str | None,
    on_change: Callable[[Key, KubeObject | None], None],
) -> dict[str, ObjectCache]:
    """One cache per kind, by source (``"volcano"``, ``"kai"``)."""

    def keyed(kind: ForeignKind) -> Callable[[KubeObject], Key]:
        return lambda obj: foreign_group_key(kind, *object_key(obj))

    return {
        source: ObjectCache(
            client, RESOURCES[source], namespace=namespace, on_change=on_change, key=keyed(kind)
        )
        for source, kind in KINDS.items()
    }


def _named_group(meta: Mapping[str, Any]) -> str | None:
    """The cache key name of the Volcano or KAI PodGroup a pod's annotations name."""
    annotations = meta.get("annotations") or {}
    for kind in KINDS.values():
        name = annotations.get(kind.annotation)
        if isinstance(name, str) and name.strip():
            return kind.prefix + name.strip()
    return None


def _slim(obj: KubeObject) -> KubeObject:
    """What the member counts read of a pod."""
    meta = obj.get("metadata") or {}
    wanted = {k.annotation for k in KINDS.values()}
    return {
        "metadata": {
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "annotations": {
                k: v for k, v in (meta.get("annotations") or {}).items() if k in wanted
            },
        },
        "spec": {k: (obj.get("spec") or {}).get(k) for k in ("schedulerName", "nodeName")},
        "status": {"phase": (obj.get("status") or {}).get("phase")},
    }


class ForeignGroupStatusWriter:
    """Event-loop only. ``feeds`` run as long as the gangs do; ``gangs`` are the gang manager's
    statuses now."""

    def __init__(
        self,
        client: KubeClient,
        *,
        groups: Mapping[str, Mapping[Key, KubeObject]],
        gangs: Callable[[], Iterable[GangStatus]],
        scheduler_names: Collection[str],
        events: EventRecorder | None = None,
        namespace: str | None = None,
        interval_s: float = 1.0,
        now: Callable[[], str] = now_text,
        started: asyncio.Event | None = None,
        active: Callable[[], bool] = lambda: True,
        present: asyncio.Event | None = None,
    ) -> None:
        """``groups``: the PodGroups by source; ``started``: writing begins once it is set;
        ``active``: checked before every pass (only the leader writes); ``present``: set once a
        PodGroup of either kind has been seen (default: at once)."""
        self._client = client
        self._groups = groups
        self._gangs = gangs
        self._schedulers = frozenset(scheduler_names)
        self._events = events if events is not None else EventRecorder(client)
        self._interval_s = interval_s
        self._now = now
        self._started = started
        self._active = active
        if present is None:
            present = asyncio.Event()
            present.set()
        self._present = present
        #: One handler per watch (a list replaces what its handler holds).
        self.members = {name: MemberPods(_named_group) for name in sorted(self._schedulers)}
        self.watches = [
            Reflector(
                client,
                PODS,
                members,
                namespace=namespace,
                field_selector=f"spec.schedulerName={name}",
                slim=_slim,
                what=f"Volcano/KAI PodGroup member pods ({name})",
            )
            for name, members in self.members.items()
        ]
        self._written: dict[Key, tuple[str, dict[str, Any]]] = {}
        self._told: set[str] = set()  # PodGroup UIDs whose ignored fields were told
        self.writes = 0

    @property
    def feeds(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        return [self._watch_members, self.run]

    async def _watch_members(self) -> None:
        await self._present.wait()
        await asyncio.gather(*(w.run() for w in self.watches))

    async def run(self) -> None:
        await self._present.wait()
        for watch in self.watches:
            await watch.synced.wait()
        if self._started is not None:
            await self._started.wait()
        while True:
            try:
                if self._active():
                    await self.sync()
            except Exception:
                log.exception("writing Volcano/KAI PodGroup status failed")
            await asyncio.sleep(self._interval_s)

    async def sync(self) -> None:
        """Tell each new group of ours what is ignored; write every status that differs."""
        gangs = {(s.namespace, s.name, s.source): s for s in self._gangs()}
        counts, ours = self._counts()
        present: set[Key] = set()
        uids: set[str] = set()
        for source, objects in self._groups.items():
            kind = KINDS[source]
            for key, obj in list(objects.items()):
                present.add(key)
                meta = obj.get("metadata") or {}
                uid = str(meta.get("uid") or "")
                uids.add(uid)
                if key not in ours and key not in self._written:
                    continue
                name = key[1][len(kind.prefix) :]
                await self._tell(kind, key[0], name, uid, obj)
                n = counts.get(key, MemberCounts())
                want = self._status(kind, obj, n, gangs.get((key[0], name, source)))
                if want is not None:
                    await self._write(kind, key, name, uid, want)
        for gone in self._written.keys() - present:
            del self._written[gone]
        self._told &= uids

    def _counts(self) -> tuple[dict[Key, MemberCounts], set[Key]]:
        """Member counts by group over every profile's pods, and the groups that have any."""
        total: dict[Key, MemberCounts] = {}
        for members in self.members.values():
            counts, _ = members.counts(self._schedulers)
            for key, n in counts.items():
                t = total.get(key, MemberCounts())
                total[key] = MemberCounts(
                    *(a + b for a, b in zip(astuple(t), astuple(n), strict=True))
                )
        return total, set(total)

    def _status(
        self, kind: ForeignKind, obj: Mapping[str, Any], n: MemberCounts, gang: GangStatus | None
    ) -> dict[str, Any] | None:
        size = min_member(kind, obj, "")
        if isinstance(size, str):
            return None  # the gang step reports the bad object on every member
        status = obj.get("status") or {}
        waiting = gang.message if gang is not None and gang.phase != "Bound" else None
        if kind is VOLCANO:
            return volcano_status(size, n, waiting, status, now=self._now())
        if waiting is None and n.scheduled < size:
            waiting = f"{n.pods} of {size} members exist"
        labels = (obj.get("metadata") or {}).get("labels") or {}
        pool = str(labels.get(_NODE_POOL_LABEL) or "default")
        return kai_status(size, n.scheduled, waiting, status, now=self._now(), node_pool=pool)

    async def _tell(
        self, kind: ForeignKind, namespace: str, name: str, uid: str, obj: Mapping[str, Any]
    ) -> None:
        if uid in self._told:
            return
        self._told.add(uid)
        said = ignored(kind, obj)
        if said is None:
            return
        reason, message = said
        try:  # told already, before a restart or by the leader before this one
            listed = await self._client.list(
                EVENTS,
                namespace=namespace,
                field_selector=f"involvedObject.uid={uid},reason={reason}",
            )
            if uid and listed["items"]:
                return
        except KubeError as exc:
            log.warning("Events of PodGroup %s/%s: %s", namespace, name, exc)
        ref: ObjectReference = {
            "apiVersion": kind.api,
            "kind": "PodGroup",
            "name": name,
            "namespace": namespace,
        }
        if uid:
            ref["uid"] = uid
        try:
            await self._events.record(ref, reason=reason, message=message)
        except KubeError as exc:
            log.warning("Event on PodGroup %s/%s: %s", namespace, name, exc)

    async def _write(
        self, kind: ForeignKind, key: Key, name: str, uid: str, want: dict[str, Any]
    ) -> None:
        last = self._written.get(key)
        if last is not None and last == (uid, want):
            return  # written already; the watch has not shown it yet
        resource = RESOURCES[kind.source]
        try:
            if kind is VOLCANO:  # no status subresource in Volcano's CRD
                await self._client.patch(resource, name, {"status": want}, namespace=key[0])
            else:
                await self._client.patch(
                    resource, name, {"status": want}, namespace=key[0], subresource="status"
                )
        except NotFound:
            self._written.pop(key, None)
            return
        except KubeError as exc:
            log.warning("status of PodGroup %s/%s (%s): %s", key[0], name, kind.api, exc)
            return
        self.writes += 1
        self._written[key] = (uid, want)
