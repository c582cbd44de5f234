"""The coordinator's authoritative inventory: one record per node, merged from agent reports, the
Node object and the pods bound to the node.

Everything here runs on the event loop and does no I/O; time comes from an injected clock
(monotonic seconds). Readers get frozen :class:`NodeState` views, built lazily and cached until the
node changes. Subscribers get an :class:`InventoryEvent` for every change, with
``capacity_gained`` set when the node can now take more than before (the scheduler re-queues
pending pods on those).

Only a node with a Node object is schedulable. A report for a name without one is kept for
``unknown_node_ttl_s``, then dropped (:meth:`Inventory.expire_unknown`); at most
:data:`MAX_UNKNOWN_NODES` such names at once. Reports are validated first (:mod:`.validate`) and
no GPU or MIG UUID may be on two live nodes. Until a node's agent stream reports, its topology is
the one published on its Node (``topos.io/topology``, source ``"annotation"``) — except during
``agent_grace_s`` after start-up, if set: then it has none. A stream's word always wins; an
annotation that changes while no stream is connected is newer than what the closed stream said and
replaces it (:mod:`.record` has the rules).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from common.labels import TOPOLOGY as TOPOLOGY_ANNOTATION
from common.model import NodeTopology
from common.wire import CloseReason, ContainerAllocation, FrameError, GpuState, apply_gpu_states
from coordinator.core.domains.sources import TreeLevels, disagreement
from coordinator.inventory import record
from coordinator.inventory.devices import DeviceOwners
from coordinator.inventory.holdings import with_holdings
from coordinator.inventory.record import NodeRecord
from coordinator.inventory.state import AgentReport, BoundPod, KubeNode, NodeState
from coordinator.inventory.validate import check_delta, check_report, warn_unknown_holdings

log = logging.getLogger(__name__)

EventKind = Literal["added", "updated", "removed", "stale", "recovered"]
DEFAULT_STALE_TTL_S: Final = 30.0
DEFAULT_UNKNOWN_NODE_TTL_S: Final = 60.0
#: Agent-reported names without a Node object held at once; more hellos for such names are refused.
MAX_UNKNOWN_NODES: Final = 1024
#: Nodes whose own level labels differ from a watched tree's named one by one; then a count.
_DISAGREEMENTS_SHOWN: Final = 10


@dataclass(frozen=True, slots=True)
class TreeStatus:
    """Where the domain tree comes from and what of it cannot be used (``GET /v1/domains``)."""

    source: str  # "labels" (the Node's own) | "volcano" | "kueue" | "kai"
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class InventoryEvent:
    kind: EventKind
    node: str
    capacity_gained: bool = False
    pods_only: bool = False  # only its pods changed: labels, taints, hardware are as they were
    #: the uid of the one pod that changed where it is (started, relabelled): the node holds the
    #: same pods as before (``None``: pods came or went, or the node itself changed)
    changed_in_place: str | None = None
    #: the one pod that came to the node (bound there, or moved there): only pending pods that
    #: wait for a pod like it to appear (required pod affinity, topology spread) may fit now
    came: BoundPod | None = None
    #: an in-place change that kept the pod's namespace and labels (it started, its status
    #: moved): no pod's (anti-)affinity or spread can tell it from before
    labels_kept: bool = False
    #: the one pod that left the node (ended, deleted, or moved away), as it was last held:
    #: with ``came`` and ``changed_in_place``, subscribers follow a node's pods one at a time
    #: instead of walking them all (a DaemonSet's node holds thousands)
    left: BoundPod | None = None


Listener = Callable[[InventoryEvent], None]
_ENDED_KEPT = 4096
_Signature = tuple[bool, bool, tuple[tuple[str, int], ...]]


class Inventory:
    """The store. Not thread-safe: call it from the event loop only."""

    def __init__(
        self,
        *,
        stale_ttl_s: float = DEFAULT_STALE_TTL_S,
        unknown_node_ttl_s: float = DEFAULT_UNKNOWN_NODE_TTL_S,
        agent_grace_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if stale_ttl_s <= 0 or unknown_node_ttl_s <= 0:
            raise ValueError("stale_ttl_s and unknown_node_ttl_s must be positive")
        if agent_grace_s < 0:
            raise ValueError("agent_grace_s must not be negative")
        self.stale_ttl_s = stale_ttl_s
        self.unknown_node_ttl_s = unknown_node_ttl_s
        self._clock = clock
        self._grace_until = clock() + agent_grace_s
        self._in_grace = agent_grace_s > 0
        self._records: dict[str, NodeRecord] = {}
        self._unknown: dict[str, float] = {}  # agent-reported names without a Node object: since
        self._devices = DeviceOwners(self._live)  # no GPU or MIG UUID on two live nodes
        self._pod_node: dict[str, str] = {}  # uid -> node
        #: Pods that left having run to their end (Succeeded or Failed on their own), the last
        #: few thousand: a pod deleted, preempted or evicted is not among them.
        self._ended: dict[str, None] = {}
        self._listeners: list[Listener] = []
        self.generation = 0  # bumped on every change; snapshots compare it
        self._tree: TreeLevels | None = None  # a watched source's tree (None: the Node's labels)
        self._tree_source = "labels"
        self._tree_note: str | None = None

    # --- subscriptions ---------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` on every change; returns a function that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _emit(self, event: InventoryEvent) -> None:
        self.generation += 1
        for listener in tuple(self._listeners):
            try:
                listener(event)
            except Exception:  # a broken subscriber must not break ingest
                log.exception("inventory listener failed on %s", event)

    # --- capacity bookkeeping --------------------------------------------------------------------

    def _signature(self, rec: NodeRecord | None) -> _Signature:
        if rec is None:
            return (False, False, ())
        has_topology = self._topology(rec) is not None
        return (self._schedulable(rec), has_topology, tuple(sorted(self._free(rec).items())))

    def _gained(self, before: _Signature, after: NodeRecord) -> bool:
        sched, free = self._schedulable(after), self._free(after)
        if not sched:
            return False
        if not before[0] or (self._topology(after) is not None and not before[1]):
            return True
        old = dict(before[2])
        return any(v > old.get(k, 0) for k, v in free.items())

    @staticmethod
    def _schedulable(rec: NodeRecord) -> bool:
        return record.schedulable(rec)

    def _topology(self, rec: NodeRecord) -> NodeTopology | None:
        return record.topology_of(rec, seeds=not self._in_grace)[0]

    def _free(self, rec: NodeRecord) -> dict[str, int]:
        return record.free(rec, self._topology(rec))

    def _changed(
        self,
        rec: NodeRecord,
        kind: EventKind,
        was: _Signature | None,
        pods: bool = False,
        in_place: str | None = None,
        came: BoundPod | None = None,
        labels_kept: bool = False,
        left: BoundPod | None = None,
    ) -> None:
        """``was``: the node's signature before the change; ``None``: it gained no room."""
        rec.view = rec.sched = rec.bound = None
        gained = was is not None and self._gained(was, rec)
        self._emit(InventoryEvent(kind, rec.name, gained, pods, in_place, came, labels_kept, left))

    def _record(self, name: str) -> tuple[NodeRecord, bool]:
        rec = self._records.get(name)
        if rec is None:
            rec = self._records[name] = NodeRecord(name)
            return rec, True
        return rec, False

    def _drop_if_empty(self, rec: NodeRecord) -> bool:
        if rec.empty():
            del self._records[rec.name]
            return True
        return False

    # --- agent side ------------------------------------------------------------------------------

    def apply_hello(
        self,
        node: str,
        *,
        agent_id: str,
        agent_version: str,
        seq: int,
        topology: NodeTopology,
        allocations: tuple[ContainerAllocation, ...],
    ) -> None:
        """Keep a validated report. Raises ``FrameError`` (and changes nothing) for an impossible
        report, a device another live node reports, or one unknown node too many."""
        devices = check_report(topology, allocations)
        current = self._records.get(node)
        unknown = current is None or current.kube is None
        if unknown and node not in self._unknown and len(self._unknown) >= MAX_UNKNOWN_NODES:
            raise FrameError(
                CloseReason.UNKNOWN_NODE,
                f"node {node} has no Node object and {len(self._unknown)} such nodes are held",
            )
        self._devices.check(node, devices)
        rec, new = self._record(node)
        before = self._signature(None if new else rec)
        was_stale = rec.stale
        if unknown:
            self._unknown.setdefault(node, self._clock())
        self._devices.claim(node, devices)
        warn_unknown_holdings(node, topology, allocations)
        rec.gone.clear()
        rec.agent = AgentReport(
            agent_id=agent_id,
            agent_version=agent_version,
            seq=seq,
            topology=topology,
            allocations=allocations,
            last_seen=self._clock(),
        )
        rec.stale = False
        kind: EventKind = "added" if new else ("recovered" if was_stale else "updated")
        self._changed(rec, kind, before)

    def apply_delta(
        self,
        node: str,
        *,
        seq: int,
        gpus: tuple[GpuState, ...],
        allocations: tuple[ContainerAllocation, ...] | None,
    ) -> None:
        """Apply a validated delta. Raises ``FrameError`` (and changes nothing) if it doesn't fit
        the node's reported topology; ``KeyError`` if the node never said hello."""
        rec = self._records[node]
        agent = rec.agent
        if agent is None:
            raise KeyError(node)
        topology = apply_gpu_states(agent.topology, gpus)  # validates before anything changes
        devices = check_delta(topology, agent.allocations if allocations is None else allocations)
        self._devices.check(node, devices)
        before = self._signature(rec)
        self._devices.claim(node, devices)
        if allocations is not None and allocations != agent.allocations:
            warn_unknown_holdings(node, topology, allocations)
            rec.gone.clear()
        was_stale = rec.stale
        rec.agent = msgspec.structs.replace(
            agent,
            seq=seq,
            topology=topology,
            allocations=agent.allocations if allocations is None else allocations,
            last_seen=self._clock(),
            connected=True,
        )
        rec.stale = False
        self._changed(rec, "recovered" if was_stale else "updated", before)

    def reports_holdings(self, name: str) -> bool:
        """Whether the node's agent reports which devices pods hold (without such a report a
        node has no mismatches to show)."""
        rec = self._records.get(name)
        return rec is not None and rec.agent is not None and bool(rec.agent.allocations)

    def _live(self, name: str) -> bool:
        rec = self._records.get(name)
        return rec is not None and rec.agent is not None and not rec.stale

    def touch(self, node: str) -> None:
        """A heartbeat: the agent is alive and its state unchanged."""
        rec = self._records.get(node)
        if rec is None or rec.agent is None:
            return
        if not rec.agent.connected:
            rec.view = rec.sched = None
        rec.agent = msgspec.structs.replace(rec.agent, last_seen=self._clock(), connected=True)
        if rec.stale:
            before = self._signature(rec)
            rec.stale = False
            self._changed(rec, "recovered", before)

    def agent_disconnected(self, node: str, agent_id: str) -> None:
        """The stream closed. The node keeps its state until the TTL makes it stale."""
        rec = self._records.get(node)
        if rec is None or rec.agent is None or rec.agent.agent_id != agent_id:
            return
        before = self._signature(rec)
        rec.agent = msgspec.structs.replace(rec.agent, connected=False)
        self._changed(rec, "updated", before)

    def sweep(self) -> list[str]:
        """Mark nodes whose agent is silent past the TTL stale; returns the newly stale names.
        Also ends the start-up grace once it has passed (nodes whose agent is not back take
        the topology on their Node object)."""
        self.end_grace()
        now = self._clock()
        newly: list[str] = []
        for rec in self._records.values():
            if rec.stale or rec.agent is None:
                continue
            if now - rec.agent.last_seen > self.stale_ttl_s:
                before = self._signature(rec)
                rec.stale = True
                newly.append(rec.name)
                self._changed(rec, "stale", before)
        return newly

    def grace_left_s(self) -> float:
        """Seconds of the start-up grace left (0 once over)."""
        return max(0.0, self._grace_until - self._clock()) if self._in_grace else 0.0

    def end_grace(self) -> None:
        """End the start-up grace if it is due (nodes whose agent is not back take the topology
        on their Node object from now on)."""
        if not self._in_grace or self._clock() < self._grace_until:
            return
        used = [r for r in self._records.values() if r.agent is None and r.kube and r.kube.topology]
        before = {r.name: self._signature(r) for r in used}
        self._in_grace = False
        if used:  # one line, not one per node (5,000 KWOK nodes have no agent)
            log.info("%d nodes with no agent yet use their Node's topology", len(used))
        for rec in used:
            self._changed(rec, "updated", before[rec.name])

    def expire_unknown(self) -> list[str]:
        """Drop agent reports for names that had no Node object for ``unknown_node_ttl_s``;
        returns those names (their streams should be closed)."""
        now = self._clock()
        expired = [n for n, t in self._unknown.items() if now - t > self.unknown_node_ttl_s]
        for name in expired:
            del self._unknown[name]
            rec = self._records.get(name)
            if rec is None or rec.agent is None or rec.kube is not None:
                continue
            before = self._signature(rec)
            self._devices.release(name)
            rec.agent = None
            rec.stale = False
            if self._drop_if_empty(rec):
                self._emit(InventoryEvent("removed", name))
            else:
                self._changed(rec, "updated", before)
        return expired

    def unknown_nodes(self) -> list[str]:
        """Names agents report that the API server does not have (yet)."""
        return sorted(self._unknown)

    # --- the domain tree from a watched source ---------------------------------------------------

    def set_tree(self, tree: TreeLevels, *, source: str, note: str | None = None) -> None:
        """From now on every node's leaf, spine and zone are ``tree``'s word on it (not the
        Node's own labels of those keys); nodes whose levels change are ``updated``. ``note``:
        what the source's watcher has to say (an object missing), shown first among the
        problems."""
        self._tree, self._tree_source, self._tree_note = tree, source, note
        for rec in list(self._records.values()):
            if self._relevel(rec):
                self._changed(rec, "updated", self._signature(rec))

    def set_tree_note(self, note: str | None) -> None:
        """Say something about the source without changing the tree (the tree is kept)."""
        self._tree_note = note

    def _relevel(self, rec: NodeRecord) -> bool:
        """Read ``rec``'s levels from the tree again; whether its labels changed."""
        if self._tree is None:
            return False
        before = record.labels(rec)
        levels, problem = (
            ({}, None) if rec.kube is None else self._tree.levels_of(rec.name, rec.kube.labels)
        )
        rec.levels, rec.level_problem = levels, problem
        own = {} if rec.kube is None else rec.kube.labels
        rec.level_disagreement = disagreement(rec.name, own, levels, self._tree_source)
        return record.labels(rec) != before

    def level_problems(self, names: Iterable[str] | None = None) -> dict[str, str]:
        """Node → why the watched tree cannot place it (in two HyperNodes of one tier), for
        ``names`` (default: every node)."""
        picked = self._records if names is None else {n: self._records.get(n) for n in names}
        return {n: r.level_problem for n, r in picked.items() if r is not None and r.level_problem}

    def tree_status(self) -> TreeStatus:
        problems = [] if self._tree_note is None else [self._tree_note]
        if self._tree is not None:
            problems.extend(self._tree.problems)
            records = [r for _, r in sorted(self._records.items())]
            problems.extend(r.level_problem for r in records if r.level_problem)
            differ = [r.level_disagreement for r in records if r.level_disagreement]
            problems.extend(differ[:_DISAGREEMENTS_SHOWN])
            if len(differ) > _DISAGREEMENTS_SHOWN:
                more = len(differ) - _DISAGREEMENTS_SHOWN
                problems.append(f"… and {more} more nodes whose own labels differ from the tree")
        return TreeStatus(self._tree_source, tuple(problems))

    # --- API-server side -------------------------------------------------------------------------

    def upsert_node(self, node: KubeNode) -> bool:
        """Whether anything changed (a Node update the scheduler cannot see changes nothing)."""
        rec, new = self._record(node.name)
        if rec.kube == node:
            return False
        before = self._signature(None if new else rec)
        kind: EventKind = "added" if new else "updated"
        if self._annotation_is_newer(rec, node):
            log.info(
                "node %s: %s changed while no agent stream is connected; it replaces what the "
                "closed stream last reported",
                node.name,
                TOPOLOGY_ANNOTATION,
            )
            self._devices.release(node.name)
            kind = "recovered" if rec.stale else kind
            rec.agent, rec.stale = None, False
            rec.gone.clear()
        rec.kube = node
        self._relevel(rec)
        self._unknown.pop(node.name, None)
        self._changed(rec, kind, before)
        return True

    @staticmethod
    def _annotation_is_newer(rec: NodeRecord, node: KubeNode) -> bool:
        """A closed stream's report gives way to an annotation published after it: the Node's
        topology changed while no stream was connected (a stream's own word always wins)."""
        agent, old = rec.agent, rec.kube
        if agent is None or agent.connected or old is None or node.topology is None:
            return False
        return node.topology != old.topology

    def delete_node(self, name: str) -> None:
        rec = self._records.get(name)
        if rec is None or rec.kube is None:
            return
        before = self._signature(rec)
        rec.kube = None
        if rec.agent is not None:
            self._unknown[name] = self._clock()  # its agent still reports: expires unless re-added
        if self._drop_if_empty(rec):
            self._emit(InventoryEvent("removed", name))
        else:
            self._changed(rec, "updated", before)

    def upsert_pod(self, pod: BoundPod) -> bool:
        """A bound, non-terminal pod (any scheduler; re-binding moves it). Whether it changed."""
        old_node = self._pod_node.get(pod.uid)
        old = None if old_node is None else self._records[old_node].pods.get(pod.uid)
        if old == pod:
            return False
        in_place, came, labels_kept = None, None, False
        # A pod's coming or change gains the node room only if a request shrank: what makes a
        # node schedulable or gives it a topology is not its pods, and a pod that came holds
        # more, never less. So the node's free room is read before and after only then.
        before: _Signature | None = None
        if old is not None and old_node == pod.node:
            # Changed where it is (started, relabelled): one event, and room counts as gained
            # only if its requests shrank (not "it left, then came back").
            rec, new = self._records[pod.node], False
            if any(pod.requests.get(k, 0) < v for k, v in old.requests.items()):
                before = self._signature(rec)
            _take(rec.requested, old.requests)
            in_place = pod.uid
            labels_kept = old.labels == pod.labels  # the same uid: the same namespace
        else:
            came = pod
            if old_node is not None:
                self.delete_pod(pod.uid)
            rec, new = self._record(pod.node)
        rec.pods[pod.uid] = pod
        for k, v in pod.requests.items():
            rec.requested[k] = rec.requested.get(k, 0) + v
        self._pod_node[pod.uid] = pod.node
        self._changed(
            rec,
            "added" if new else "updated",
            before,  # None: no room gained
            pods=not new,
            in_place=in_place,
            came=came,
            labels_kept=labels_kept,
        )
        return True

    def delete_pod(self, uid: str, *, ended: bool = False) -> None:
        """The pod finished, was deleted, or left the node; ``ended``: it ran to its end
        (:meth:`ran_to_end` says so from then on)."""
        node = self._pod_node.get(uid)
        if node is None:
            return
        if ended:
            self._ended[uid] = None
            while len(self._ended) > _ENDED_KEPT:
                del self._ended[next(iter(self._ended))]
        del self._pod_node[uid]
        rec = self._records[node]
        before = self._signature(rec)
        pod = rec.pods.pop(uid)
        key = (pod.namespace, pod.name)
        held = () if rec.agent is None else rec.agent.allocations
        if any((a.namespace, a.pod) == key for a in held):
            rec.gone.add(key)  # its agent's word on the pod is stale (none: nothing to hide)
        _take(rec.requested, pod.requests)
        if self._drop_if_empty(rec):
            self._emit(InventoryEvent("removed", node, left=pod))
        else:
            self._changed(rec, "updated", before, pods=True, left=pod)

    def replace_nodes(self, nodes: list[KubeNode]) -> None:
        """Resynchronise Node objects after a (re)list: drop those the API server no longer has."""
        keep = {n.name for n in nodes}
        for name in [r.name for r in self._records.values() if r.kube is not None]:
            if name not in keep:
                self.delete_node(name)
        for n in nodes:
            self.upsert_node(n)

    def replace_pods(self, pods: list[BoundPod]) -> None:
        """Resynchronise bound pods after a (re)list."""
        keep = {p.uid for p in pods}
        for uid in [u for u in self._pod_node if u not in keep]:
            self.delete_pod(uid)
        for p in pods:
            self.upsert_pod(p)

    # --- reading ---------------------------------------------------------------------------------

    def __contains__(self, name: object) -> bool:
        return name in self._records

    def __len__(self) -> int:
        return len(self._records)

    def names(self) -> list[str]:
        return sorted(self._records)

    def node(self, name: str) -> NodeState | None:
        rec = self._records.get(name)
        return None if rec is None else self._view(rec)

    def scheduling_node(self, name: str) -> NodeState | None:
        """As :meth:`node` without the display parts (``gpu_use``, ``mismatches``, ``pods``,
        ``last_seen_age_s`` as of the last change): what the scheduler's snapshot reads, rebuilt
        once per change of the node."""
        rec = self._records.get(name)
        if rec is None:
            return None
        if rec.sched is None:
            rec.sched = record.build_view(
                rec, now=self._clock(), seeds=not self._in_grace, display=False
            )
        return rec.sched

    def nodes(self) -> Iterator[NodeState]:
        for name in self.names():
            yield self._view(self._records[name])

    def ran_to_end(self, uid: str) -> bool:
        """Whether the pod ``uid`` left its node having run to its end (not deleted, preempted
        or evicted), as its last watch event said (one of the last few thousand to leave)."""
        return uid in self._ended

    def bound_pod(self, uid: str) -> BoundPod | None:
        """The bound pod with this UID, if the inventory holds it (as it was reported: without
        the devices the agent says it holds)."""
        node = self._pod_node.get(uid)
        return None if node is None else self._records[node].pods.get(uid)

    def bound_pods(self, name: str) -> tuple[BoundPod, ...]:
        """The pods bound to node ``name`` (any scheduler), for the scheduler's snapshot, with
        the devices the agent reports each holds (``held_gpus``)."""
        rec = self._records.get(name)
        if rec is None:
            return ()
        if rec.bound is None:  # every change of the node goes through _changed, which resets it
            rec.bound = with_holdings(rec.pods.values(), record.held(rec))
        return rec.bound

    def _view(self, rec: NodeRecord) -> NodeState:
        agent = rec.agent
        if rec.view is None:
            rec.view = record.build_view(rec, now=self._clock(), seeds=not self._in_grace)
            return rec.view
        if agent is None:
            return rec.view
        # the cached view, with last_seen_age_s refreshed on every read
        age = round(self._clock() - agent.last_seen, 3)
        return msgspec.structs.replace(rec.view, last_seen_age_s=age)


def _take(requested: dict[str, int], requests: Mapping[str, int]) -> None:
    """A pod's ``requests`` no longer counted in its node's ``requested``."""
    for k, v in requests.items():
        left = requested.get(k, 0) - v
        if left > 0:
            requested[k] = left
        else:
            requested.pop(k, None)
