"""Room held for preemptors while their victims terminate, as kube-scheduler's nominator holds it.

A pod that preempted is *nominated* on the node(s) its plan freed (``status.nominatedNodeName``;
every member of a gang at once). Until the nomination ends, every pod of **equal or lower**
priority is scheduled on a snapshot where the nominated pod already sits on that node, so it
cannot take the room; a pod of higher priority sees the node as it is and may. The preemptor
itself (and, for a gang, its siblings) is not counted against itself, and it tries its
nominated node first when it is retried.

A nomination is kept by pod UID and ends when the pod is bound (anywhere), deleted, recreated
under its name, when a higher-priority preemptor takes the node, when its own preemption finds
nothing to do, or when the API server's ``status.nominatedNodeName`` is cleared. The API server is
the record: a pending pod seen with ``status.nominatedNodeName`` (after a restart, or written by
another coordinator) is nominated there. An update that shows no nomination while one is held in
memory keeps it unless the object had one before (our own patch may still be on its way — the
rule kube-scheduler's ``UpdateNominatedPod`` follows).

Held pods count with their requests and host ports only (no labels, no affinity terms), so a
nomination never makes another pod's affinity hold. A pod asking whole GPUs holds *how many*, not
which. A pod asking **part of a GPU** holds its share on one GPU: the one its preemption freed
room on (the plan names it), or — nominated by the API server's word alone, after a restart —
one with room for it now. Held there even while the victims still hold it, the room they free is
its: another pod of equal or lower priority cannot take it (its ``nvidia.com/gpu: 1``, a
time-slicing replica, is no whole GPU held).

**Reservations** hold room the same way for pods that do not exist yet: the placement admission
check (:mod:`coordinator.engine.admission`) reserves, for a workload it found room for, one entry
per pod where the what-if placed it. A reservation belongs to a *group* (``namespace/name`` of the
workload); pods carrying the group's label (``topos.io/placement-group``, written into their
template through Kueue's podSetUpdates) are not held off by it, try its nodes first, and each
one bound takes one entry off (on its node when there is one there). The rest of the cluster sees
the room as taken, as for a nomination. A reservation ends when every entry is taken or the
check releases it (the workload gone, evicted or finished). Background compaction reserves the
same way for a gang it moves whole (group ``gang:namespace/name``, the gang's recreated pods
its members), until they bind or the nomination TTL ends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace

from common.podkeys import GPU_RESOURCE
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision, ScheduleResult
from coordinator.core.podspec.parse import PodRequest, PodSpecError
from coordinator.core.podspec.sharing import GpuShare
from coordinator.core.preemption.shares import room_of
from coordinator.core.queue import QueuedPod, SchedulingQueue
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement, PodInfo
from coordinator.core.snapshot.snapshot import Snapshot

log = logging.getLogger(__name__)

__all__ = ["Nominated", "Nominations"]


@dataclass(frozen=True, slots=True)
class Nominated:
    """One pod's claim on a node."""

    uid: str
    key: str
    node: str
    priority: int
    info: PodInfo  # what it holds there: requests and host ports
    share: GpuShare | None = None  # the part of one GPU it asks for
    gpu: str | None = None  # the GPU (uuid) its share is held on; None: one with room now
    group: str | None = None  # a reservation's workload (namespace/name); None: a nomination

    def on(self, node: NodeInfo) -> PodInfo:
        """What it holds on ``node``: for a share, its part of one GPU there."""
        topo = node.topology
        if self.share is None or topo is None:
            return self.info
        uuid = self.gpu
        if not any(g.uuid == uuid for g in topo.gpus):
            fresh = node.free_whole_gpus > 0
            uuid = room_of(node).gpu_for(node.name, self.share, frozenset(), fresh=fresh)
        index = next((g.index for g in topo.gpus if g.uuid == uuid), None)
        held = self.share.on_gpu(topo.gpus[index].memory_total_mib) if index is not None else None
        if index is None or held is None:
            return self.info
        return replace(self.info, device_ids=(topo.gpus[index].uuid,), share=held)


def _held(request: PodRequest) -> PodInfo:
    requests = request.requests
    if request.share is not None and GPU_RESOURCE in requests:
        # a share's nvidia.com/gpu is a replica of its GPU, never a whole GPU held
        requests = {k: v for k, v in requests.items() if k != GPU_RESOURCE}
    return PodInfo(
        namespace=request.namespace,
        name=request.name,
        requests=requests,
        nonzero=request.nonzero_on_node,
        priority=request.priority,
        uid=request.uid,
        placement=Placement(),
        host_ports=request.host_ports,
    )


PLACEMENT_GROUP = "topos.io/placement-group"


def placement_group(request: PodRequest) -> str | None:
    """The reservation group a pod belongs to: its label's (``namespace/name``), else its
    gang's (``gang:namespace/name``: room background compaction holds for a gang it moved)."""
    name = request.labels.get(PLACEMENT_GROUP)
    if name:
        return f"{request.namespace}/{name}"
    if request.gang is not None:
        return f"gang:{request.namespace}/{request.gang.name}"
    return None


#: Overlays kept (pods of a few priorities are tried in turn; the attempt's cycle and its
#: preemption plan on the same one).
_OVERLAYS_KEPT = 4


@dataclass(frozen=True, slots=True)
class _Overlay:
    base: Snapshot  # the snapshot it was made of (shared, changed in place)
    order: Sequence[NodeInfo]  # the base's node order then (a new one after any change)
    dra: object  # the base's DRA state then
    holds: list[Nominated]  # the nominations applied
    held: frozenset[str]  # the nodes they hold
    built: Snapshot


def _same(a: Sequence[Nominated], b: Sequence[Nominated]) -> bool:
    """The same nominations (objects: a change replaces a nomination), in the same order."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _api_node(entry: QueuedPod) -> str:
    return str((entry.obj.get("status") or {}).get("nominatedNodeName") or "")


class Nominations:
    """Event-loop only. ``held(uid)``: is the pod assumed on a node already (its bind in
    flight)? Then it counts there and not here. Listens to ``queue`` (the pending-pod feed)."""

    def __init__(self, queue: SchedulingQueue, *, held: Callable[[str], bool]) -> None:
        self._queue = queue
        self._held = held
        self._by_uid: dict[str, Nominated] = {}
        self._api: dict[str, str] = {}  # uid → nominatedNodeName last seen on the API object
        self._overlays: list[_Overlay] = []  # built last, newest first
        self._nodes: dict[str, tuple[NodeInfo, list[Nominated], NodeInfo]] = {}  # node overlaid
        queue.listeners.append(self._observe)

    def __len__(self) -> int:
        return sum(1 for n in self._by_uid.values() if n.group is None)

    # --- reservations (pods not made yet) -------------------------------------------------------

    def reserve(self, group: str, pods: Iterable[tuple[PodRequest, str]]) -> None:
        """Hold room for ``group``'s pods to come: each ``(request, node)`` where it goes
        (replacing an earlier reservation of the group)."""
        self.release(group, quiet=True)
        for i, (request, node) in enumerate(pods):
            uid = f"reservation:{group}:{i}"
            self._by_uid[uid] = Nominated(
                uid, request.key, node, request.priority, _held(request), group=group
            )

    def reserved(self, group: str) -> list[Nominated]:
        return [n for n in self._by_uid.values() if n.group == group]

    def groups(self) -> set[str]:
        return {n.group for n in self._by_uid.values() if n.group is not None}

    def release(self, group: str, *, quiet: bool = False) -> None:
        """``group``'s reservation ends; pods it kept out are tried again."""
        gone = [n for n in self._by_uid.values() if n.group == group]
        for n in gone:
            del self._by_uid[n.uid]
        if gone and not quiet:
            log.info("reservation of %s (%d pods) ended", group, len(gone))
            self._room_freed(max(gone, key=lambda n: n.priority))

    def _take(self, group: str, node: str) -> None:
        """A pod of ``group`` is bound on ``node``: one entry less (there, if one is)."""
        entries = self.reserved(group)
        if not entries:
            return
        entry = next((n for n in entries if n.node == node), entries[0])
        del self._by_uid[entry.uid]
        if entry.node != node:
            self._room_freed(entry)

    def node_of(self, uid: str) -> str | None:
        found = self._by_uid.get(uid)
        return found.node if found is not None else None

    def all(self) -> list[Nominated]:
        return list(self._by_uid.values())

    # --- changes -----------------------------------------------------------------------------

    def nominate(self, request: PodRequest, node: str, *, gpu: str | None = None) -> None:
        """``request`` holds room on ``node`` from now on (replacing any earlier nomination);
        ``gpu``: the GPU (uuid) a share holds its room on."""
        before = self._by_uid.get(request.uid)
        self._by_uid[request.uid] = Nominated(
            request.uid,
            request.key,
            node,
            request.priority,
            _held(request),
            share=request.share,
            gpu=gpu if request.share is not None else None,
        )
        if before is not None and before.node != node:
            self._room_freed(before)

    def drop(self, uid: str) -> Nominated | None:
        """The nomination ends; pods it kept out are tried again."""
        found = self._by_uid.pop(uid, None)
        if found is not None:
            log.info("nomination of %s on %s ended", found.key, found.node)
            self._room_freed(found)
        return found

    def bound(self, uid: str, node: str, *, group: str | None = None) -> None:
        """The pod is bound on ``node``: it holds room there as any bound pod does (and takes
        one entry of its ``group``'s reservation)."""
        if group is not None:
            self._take(group, node)
        found = self._by_uid.pop(uid, None)
        self._api.pop(uid, None)
        if found is not None and found.node != node:
            self._room_freed(found)  # bound elsewhere: the held node is free for others

    def lower_on(self, nodes: Collection[str], priority: int) -> list[Nominated]:
        """Nominations below ``priority`` on ``nodes`` (a higher preemptor takes their room)."""
        return [
            n
            for n in self._by_uid.values()
            if n.node in nodes and n.priority < priority and n.group is None
        ]

    def _room_freed(self, gone: Nominated) -> None:
        self._queue.cluster_changed(lambda p: p.priority <= gone.priority and p.uid != gone.uid)

    def _observe(self, entry: QueuedPod, present: bool) -> None:
        """The pending-pod feed added, updated or deleted ``entry``."""
        uid = entry.uid
        if not present:
            self._api.pop(uid, None)
            self.drop(uid)
            return
        if entry.where == "bound":
            return  # bound by us: an update from before the binding must not nominate it again
        node = _api_node(entry)
        before = self._api.get(uid, "")
        self._api[uid] = node
        request = entry.request
        if isinstance(request, PodSpecError):
            self.drop(uid)
            return
        if node:
            current = self._by_uid.get(uid)
            if current is None or current.node != node or current.share != request.share:
                self.nominate(request, node)
            elif current.info.requests != _held(request).requests:
                self.nominate(request, node, gpu=current.gpu)
        elif before:
            self.drop(uid)  # cleared on the API server
        # Neither before nor now on the object: a nomination held in memory stays (our own
        # status patch may not have arrived yet).

    # --- what a cycle sees -------------------------------------------------------------------

    def applicable(
        self, priority: int, exclude: Collection[str], group: str | None = None
    ) -> list[Nominated]:
        """Nominations a pod of ``priority`` must respect (``exclude``: its own UIDs;
        ``group``: its reservation group, whose entries it does not respect)."""
        return [
            n
            for n in self._by_uid.values()
            if n.priority >= priority
            and n.uid not in exclude
            and (n.group is None or n.group != group)
            and not self._held(n.uid)
        ]

    def overlay(
        self,
        snapshot: Snapshot,
        priority: int,
        exclude: Collection[str] = (),
        group: str | None = None,
    ) -> Snapshot:
        """``snapshot`` with the nominated pods a pod of ``priority`` must respect placed on
        their nodes (a copy; ``snapshot`` itself when none applies). Shared between calls while
        neither ``snapshot`` nor the nominations that apply change: treat it as read-only."""
        holds = self.applicable(priority, exclude, group)
        if not holds:
            return snapshot
        # The snapshot's node order is a new object after any change of a node, its DRA state
        # after any change of that: with the same nominations, the same overlay.
        order, dra = snapshot.nodes, snapshot.dra
        for i, entry in enumerate(self._overlays):
            if entry.order is order and entry.dra is dra and _same(entry.holds, holds):
                if i:
                    self._overlays.insert(0, self._overlays.pop(i))
                return entry.built
        by_node: dict[str, list[Nominated]] = {}
        for n in holds:
            by_node.setdefault(n.node, []).append(n)
        built = self._since(snapshot, by_node)
        if built is None:
            out: Snapshot | None = None
            for name, held in by_node.items():
                node = snapshot.get(name)
                if node is None:
                    continue
                if out is None:
                    out = snapshot.copy()
                out.replace(self._held_on(node, held))
            built = out if out is not None else snapshot
        self._overlays.insert(0, _Overlay(snapshot, order, dra, holds, frozenset(by_node), built))
        del self._overlays[_OVERLAYS_KEPT:]
        if len(self._nodes) > 2 * len(self._by_uid) + 64:
            self._nodes = {k: v for k, v in self._nodes.items() if k in by_node}
        return built

    def _since(self, snapshot: Snapshot, by_node: dict[str, list[Nominated]]) -> Snapshot | None:
        """The overlay made from the newest one of ``snapshot`` (as it was then) and what
        changed since: the nodes the snapshot changed and those held then or now (``None``:
        none to start from, or too much changed)."""
        dra = snapshot.dra
        last = next((e for e in self._overlays if e.base is snapshot and e.dra is dra), None)
        if last is None or last.built is snapshot:
            return None
        changed = snapshot.changed_since(last.order)
        if changed is None or len(changed) > len(snapshot) // 4:
            return None
        names = {n.name for n in changed} | last.held | by_node.keys()
        nodes = []
        for name in names:
            node = snapshot.get(name)
            if node is None:
                return None
            held = by_node.get(name)
            want = self._held_on(node, held) if held else node
            if last.built.get(name) is not want:
                nodes.append(want)
        return last.built.rebased(snapshot, nodes)

    def _held_on(self, node: NodeInfo, held: list[Nominated]) -> NodeInfo:
        """``node`` with ``held`` on it (kept while the node and ``held`` are the same: a node
        held for a preemptor is overlaid on every attempt while its victims go)."""
        cached = self._nodes.get(node.name)
        if cached is not None and cached[0] is node and _same(cached[1], held):
            return cached[2]
        out = node
        if any(n.share is not None for n in held):
            for n in held:  # one by one: a share looking for room sees the ones before it
                out = out.rebuild((*out.pods, n.on(out)))
        else:
            out = out.adding(tuple(n.info for n in held))
        self._nodes[node.name] = (node, held, out)
        return out

    def snapshot_for(self, request: PodRequest | PodSpecError, snapshot: Snapshot) -> Snapshot:
        """The snapshot one pod is scheduled on (the loop's hook)."""
        if isinstance(request, PodSpecError):
            return snapshot
        return self.overlay(snapshot, request.priority, (request.uid,), placement_group(request))

    def schedule(
        self, request: PodRequest | PodSpecError, snapshot: Snapshot, framework: Framework
    ) -> ScheduleResult:
        """One cycle; a nominated pod tries its nominated node first (kube-scheduler does)."""
        node = None if isinstance(request, PodSpecError) else self.node_of(request.uid)
        if node is not None and snapshot.get(node) is not None:
            first = schedule_one(request, snapshot, framework, candidate_nodes=(node,))
            if isinstance(first, Decision):
                return first
        group = None if isinstance(request, PodSpecError) else placement_group(request)
        if group is not None:  # a reserved pod tries where its reservation holds room first
            nodes = tuple(dict.fromkeys(n.node for n in self.reserved(group)))
            nodes = tuple(n for n in nodes if snapshot.get(n) is not None)
            if nodes:
                first = schedule_one(request, snapshot, framework, candidate_nodes=nodes)
                if isinstance(first, Decision):
                    return first
        return schedule_one(request, snapshot, framework)

    def gang_snapshot(self, requests: Iterable[PodRequest], snapshot: Snapshot) -> Snapshot:
        """The snapshot a gang is planned on: others' nominations at or above its priority."""
        members = list(requests)
        if not members or not self._by_uid:
            return snapshot
        priority = max(m.priority for m in members)
        return self.overlay(
            snapshot, priority, {m.uid for m in members}, placement_group(members[0])
        )
