"""Who is in which gang: what the gang step tells the pure gang manager about member pods.

Every pending member in the scheduler's queue and every bound member in the inventory is
*observed*; members that are neither (deleted, evicted, replaced under the same name) are *lost*.
A lost member of a running gang starts that gang's recovery; a lost member holding a reservation
releases its gang's attempt. A member being deleted (``deletionTimestamp`` set) is lost at once,
though it holds its capacity until it is gone. When the last member of a gang is lost the gang's
state ends (``ended``): a re-run under the same name starts from nothing, never as a recovery.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from common.podkeys import GPU_RESOURCE
from coordinator.core.gangs.identity import (
    GangKey,
    GangProblem,
    GangSpec,
    gang_instance_of,
    workload_uid,
)
from coordinator.core.gangs.manager import GangManager, Phase, Reject
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.queue import QueuedPod
from coordinator.engine.gangs.running import (
    bound_gang,
    bound_pods,
    declares_no_gang,
    names_no_gang,
)
from coordinator.engine.loop import Scheduler
from coordinator.inventory.state import BoundPod
from coordinator.inventory.store import InventoryEvent

__all__ = ["GangMembership", "PodGroups"]

#: How long a member we bound may be missing from the inventory (its watch lags) and still count.

PodGroups = Mapping[tuple[str, str], Mapping[str, Any]]


@dataclass(slots=True)
class _Cached:
    obj: Mapping[str, Any]
    spec: GangSpec | GangProblem | None


class GangMembership:
    """The members the manager knows, kept in step with the queue and the inventory."""

    def __init__(
        self,
        scheduler: Scheduler,
        manager: GangManager,
        podgroups: PodGroups,
        *,
        namespace: str | None,
        released: Callable[[GangKey | None, Reject], None],
        broken: Callable[[GangKey, str], None],
        in_flight: Callable[[GangKey, str], bool],
        ended: Callable[[GangKey], None] = lambda key: None,
    ) -> None:
        self.scheduler = scheduler
        self.manager = manager
        self.podgroups = podgroups
        self.namespace = namespace
        self._released = released  # a member's loss released its gang's attempt
        self._broken = broken  # a running gang lost a member (gang, cause)
        self._in_flight = in_flight  # is this member's bind on the wire?
        self._ended = ended  # the gang's last member is gone: drop what the step keeps for it
        self._known: dict[str, GangKey] = {}  # pod key → gang, every member the manager knows
        self._uids: dict[str, str] = {}  # pod key → uid of the member the manager knows
        self._gone_uids: set[str] = set()  # members known to be gone (the inventory may lag)
        self._bound: set[str] = set()  # members the manager counts (or counted) as bound
        self._cache: dict[str, _Cached] = {}
        #: node → uid → the bound pod last seen there declaring no gang (the same object: not
        #: looked at again)
        self._plain: dict[str, dict[str, BoundPod]] = {}
        #: node → uids of the pods last seen there that are not plain (members, pods on their
        #: way out): looked at again whenever the node's pods change
        self._others: dict[str, set[str]] = {}
        # The nodes whose bound pods changed since the last look (the inventory's events; its
        # bound pods of a node are the same objects until it tells of a change): walked whole,
        # or — when the events named each pod that came, changed or left — those pods alone;
        # and whether every node must be looked at (at first, and after a PodGroup changed: a
        # bound pod's gang may depend on one).
        self._dirty: set[str] = set()
        self._touched: dict[str, set[str]] = {}
        self._everything = True
        self._unsubscribe = scheduler.inventory.subscribe(self._node_changed)

    def _node_changed(self, event: InventoryEvent) -> None:
        name = event.node
        pod = event.came or event.left
        uid = pod.uid if pod is not None else event.changed_in_place
        if event.pods_only and uid is not None and name not in self._dirty:
            self._touched.setdefault(name, set()).add(uid)
        else:
            self._dirty.add(name)
            self._touched.pop(name, None)

    def settled(self) -> bool:
        """Nothing seen since the last :meth:`sync_bound` (no pod or node event, no PodGroup
        change) that it or :meth:`sync_gone` would have to look at."""
        return not (self._everything or self._dirty or self._touched)

    def close(self) -> None:
        """Stop hearing the inventory (the runtime stops)."""
        self._unsubscribe()

    def spec_of(self, entry: QueuedPod) -> GangSpec | GangProblem | None:
        request = entry.request
        if isinstance(request, PodRequest) and request.gang is None:
            # Parsed from this object: it declares no gang (what reading it again would say).
            self._cache.pop(entry.key, None)
            return None
        cached = self._cache.get(entry.key)
        if cached is not None and cached.obj is entry.obj:
            return cached.spec
        spec = gang_instance_of(entry.obj, self.podgroups)
        self._cache[entry.key] = _Cached(entry.obj, spec)
        return spec

    def podgroups_changed(self, namespace: str) -> None:
        """A PodGroup of ``namespace`` changed: its pods' gangs are read again."""
        self._cache.clear()
        self._everything = True  # bound pods naming it too
        members = {
            e.key
            for e in self.scheduler.queue.entries()
            if (e.obj.get("metadata") or {}).get("namespace", "default") == namespace
        }
        self.scheduler.queue.cluster_changed(lambda p: p.key in members)

    def observe(
        self, pod: str, spec: GangSpec, priority: int, *, bound: bool, uid: str, bare: bool
    ) -> None:
        old_uid = self._uids.get(pod)
        if old_uid is not None and uid and old_uid != uid:
            self._lost(pod)  # replaced under the same name (a StatefulSet, a recreated pod)
        old = self._known.get(pod)
        if old is not None and old != spec.key:
            self._forget(pod)
        if bound:
            if pod in self._bound:
                return
            self._bound.add(pod)
        self.manager.observe(pod, spec, priority=priority, bound=bound, bare=bare)
        self._known[pod] = spec.key
        if uid:
            self._uids[pod] = uid

    def placed_gpus(self, key: GangKey) -> tuple[int, ...]:
        """``nvidia.com/gpu`` of each member of ``key`` placed and not leaving (a member being
        deleted is lost at once, so it is not among them): what ``gpu-count`` counts besides the
        members being planned."""
        return tuple(requests.get(GPU_RESOURCE, 0) for _, requests in self._placed(key))

    def placed_nodes(self, key: GangKey) -> set[str]:
        """The nodes the members of ``key`` placed and not leaving are on."""
        return {node for node, _ in self._placed(key)}

    def _placed(self, key: GangKey) -> Iterator[tuple[str, Mapping[str, int]]]:
        """(node, requests) of each member of ``key`` placed and not leaving."""
        for pod in self.manager.placed_members(key):
            uid = self._uids.get(pod, "")
            bound = self.scheduler.inventory.bound_pod(uid) if uid else None
            if bound is not None:
                yield bound.node, bound.requests
                continue
            held = self.scheduler.view.held(uid) if uid else None
            if held is not None:  # bound by us a moment ago, not in the inventory yet
                yield held.node, held.info.requests

    def uid_of(self, pod: str) -> str:
        """The uid of the member known under ``pod`` (namespace/name); "" if none is known."""
        return self._uids.get(pod, "")

    def bound(self, pod: str) -> None:
        """A member's bind succeeded (the manager is told by the caller)."""
        self._bound.add(pod)

    def is_bound(self, pod: str) -> bool:
        return pod in self._bound

    def sync_pending(self) -> None:
        """Observe every pending member in the queue (siblings count before they are popped)."""
        for entry in self.scheduler.queue.entries():
            if entry.where == "bound" or not isinstance(entry.request, PodRequest):
                continue
            spec = self.spec_of(entry)
            if isinstance(spec, GangSpec) and not (
                entry.key in self._bound and self._uids.get(entry.key) == entry.uid
            ):
                self.observe_entry(entry, spec)

    def observe_entry(self, entry: QueuedPod, spec: GangSpec) -> None:
        """A pending member in the queue."""
        assert isinstance(entry.request, PodRequest)
        bare = not workload_uid(entry.obj)
        priority = entry.request.priority
        self.observe(entry.key, spec, priority, bound=False, uid=entry.uid, bare=bare)

    def sync_bound(self) -> None:
        """Observe every bound member in the inventory (running gangs, after a restart too).
        Only the nodes whose pods changed since the last call are looked at (every node at
        first and after a PodGroup changed), and on them a bound pod that declares no gang only
        when the inventory holds a new version of it: at 40,000 running pods a walk of them all
        cost the loop ~30 ms every tick."""
        inventory = self.scheduler.inventory
        touched, self._touched = self._touched, {}
        if self._everything:
            self._everything = False
            self._dirty.clear()
            touched.clear()
            names: Iterable[str] = inventory.names()
            for gone in set(self._plain) - set(names):
                del self._plain[gone]
            for gone in set(self._others) - set(names):
                del self._others[gone]
        else:
            names, self._dirty = self._dirty, set()
        for node in names:
            plain = self._plain.pop(node, {})
            self._others.pop(node, None)
            kept: dict[str, BoundPod] = {}
            others: set[str] = set()
            for pod in inventory.bound_pods(node):
                if plain.get(pod.uid) is pod or self._look_at(pod):
                    kept[pod.uid] = pod
                else:
                    others.add(pod.uid)
            self._keep(node, kept, others)
        for node, uids in touched.items():
            self._look_again(node, uids)

    def _look_again(self, node: str, uids: set[str]) -> None:
        """The pods ``uids`` of ``node`` came, changed or left: those, and the node's pods
        that are not plain, are looked at (not every pod of the node)."""
        inventory = self.scheduler.inventory
        plain = self._plain.pop(node, {})
        others = self._others.pop(node, set())
        for uid in uids | others:
            pod = inventory.bound_pod(uid)
            others.discard(uid)
            if pod is None or pod.node != node:
                plain.pop(uid, None)
            elif plain.get(uid) is not pod:
                plain.pop(uid, None)
                if self._look_at(pod):
                    plain[uid] = pod
                else:
                    others.add(uid)
        self._keep(node, plain, others)

    def _keep(self, node: str, plain: dict[str, BoundPod], others: set[str]) -> None:
        if plain:
            self._plain[node] = plain
        if others:
            self._others[node] = others

    def _look_at(self, pod: BoundPod) -> bool:
        """Observe ``pod`` if it is a member not yet counted; True if it declares no gang."""
        if self.namespace is not None and pod.namespace != self.namespace:
            return False  # another scheduler's gang: neither completed nor released here
        key = f"{pod.namespace}/{pod.name}"
        if pod.uid in self._gone_uids or pod.terminating:
            return False  # on its way out (deleted, evicted, replaced); the inventory catches up
        if key in self._bound and self._uids.get(key) == pod.uid:
            return False
        if names_no_gang(pod):
            return True
        spec = bound_gang(pod, self.podgroups)
        if spec is not None:
            bare = not pod.owner_uid
            self.observe(key, spec, pod.priority, bound=True, uid=pod.uid, bare=bare)
            return False
        return declares_no_gang(pod)

    def _present(self) -> dict[str, set[str]]:
        present: dict[str, set[str]] = {}
        for e in self.scheduler.queue.entries():
            present.setdefault(e.key, set()).add(e.uid)
        for p in bound_pods(self.scheduler.inventory):
            if p.uid not in self._gone_uids and not p.terminating:
                present.setdefault(f"{p.namespace}/{p.name}", set()).add(p.uid)
        return present

    def _alive(self, uid: str) -> bool:
        """Is the member with this UID pending, or bound and not on its way out?"""
        if uid in self.scheduler.queue:
            return True
        pod = self.scheduler.inventory.bound_pod(uid)
        return pod is not None and uid not in self._gone_uids and not pod.terminating

    def sync_gone(self) -> None:
        """Members that are neither pending, bound nor being bound are gone: tell the manager.
        Each member is looked up by its UID (a walk of every pod, only while a member's UID is
        unknown: at 40,000 running pods a walk cost the loop ~40 ms every tick)."""
        if not self._known:
            return  # no gang members known: nothing can be gone (skip walking every pod)
        present = None if all(self._uids.get(p) for p in self._known) else self._present()
        lost: list[str] = []
        for pod in tuple(self._known):
            uid = self._uids.get(pod, "")
            if present is None:
                if self._alive(uid):
                    continue
            elif uid in present.get(pod, set()) if uid else bool(present.get(pod)):
                continue
            if uid and self.scheduler.view.held(uid) is not None:
                continue  # bound by us a moment ago, not in the inventory yet (the view holds it)
            if self._in_flight(self._known[pod], pod):
                continue  # its bind is still in flight
            lost.append(pod)
        # All at once: a gang whose members all went (a Job deleted) ends, it does not recover.
        broken: dict[GangKey, str] = {}
        for pod in lost:
            key = self._known.get(pod)
            was_complete = key is not None and self.phase(key) is Phase.BOUND
            self._lost(pod, report=False)
            if key is not None and was_complete and self.phase(key) is not Phase.BOUND:
                broken.setdefault(key, f"member {pod} is gone")
        for key, cause in broken.items():
            if self.manager.status(key) is not None:
                self._broken(key, cause)

    def _lost(self, pod: str, *, report: bool = True) -> None:
        """A member is gone (deleted, evicted, replaced): a running gang starts re-forming."""
        key = self._known.get(pod)
        was_complete = key is not None and self.phase(key) is Phase.BOUND
        gone = self._uids.get(pod)
        if gone:
            self._gone_uids.add(gone)
            if self.scheduler.view.release(gone):  # it is gone: its room is free for others
                self.scheduler.queue.cluster_changed()
        self._forget(pod)  # while its uid is known: room held for it is released by uid
        self._uids.pop(pod, None)
        if not report or key is None or self.manager.status(key) is None:
            return
        if was_complete and self.phase(key) is not Phase.BOUND:
            self._broken(key, f"member {pod} is gone")

    def _forget(self, pod: str) -> None:
        self._known.pop(pod, None)
        self._bound.discard(pod)
        self._cache.pop(pod, None)
        key = self.manager.gang_of_pod(pod)
        disagreed = key is not None and bool(self.manager.disagreement(key))
        out = self.manager.remove(pod)
        if out is not None:
            self._released(key, out)
        if key is not None and self.manager.status(key) is None:
            self._ended(key)
        elif key is not None and disagreed and not self.manager.disagreement(key):
            siblings = set(self.members(key))  # the members agree now: they are tried again
            self.scheduler.queue.cluster_changed(lambda p: p.key in siblings)

    def phase(self, key: GangKey) -> Phase | None:
        status = self.manager.status(key)
        return None if status is None else Phase(status.phase)

    def members(self, key: GangKey) -> list[str]:
        return sorted(p for p, k in self._known.items() if k == key)
