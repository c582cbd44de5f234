"""The inventory as the scheduling core sees it: a :class:`~coordinator.core.Snapshot` of
:class:`~coordinator.core.NodeInfo`, kept current incrementally, plus the pods *assumed*
onto nodes whose bind is not confirmed yet.

``ClusterView`` subscribes to the inventory and marks a node dirty on every change; taking a
snapshot rebuilds only dirty nodes (a ``NodeInfo`` per node is cached until its node changes,
and a ``PodInfo`` per bound pod until that pod changes). Assumptions live here, not in the
inventory, keyed by the pod's UID (a pod re-created under the same name is another pod and never
waits for its predecessor's). An assumed pod counts on its node until:

- the inventory shows it bound (the bound-pods watch caught up): from then on the inventory
  counts it, and its deletion frees the room at once;
- it is released (:meth:`ClusterView.release`): its bind failed, or the pod was deleted or
  replaced under its name before its bind was seen;
- bound but never seen, its confirmation deadline passes (``assume_ttl_s``). This is only a
  last-resort safety net for a watch that missed the pod entirely; it does not fire in normal
  operation.

Whenever room is released without the inventory taking it over, ``on_release`` is called with
the pod that held it (the scheduler retries the pods its leaving may help), or ``None`` when
DRA claims or several pods' room went with it (the scheduler retries every pod waiting).

DRA (:attr:`Snapshot.dra <coordinator.core.snapshot.snapshot.Snapshot.dra>`): the watched
ResourceSlices, DeviceClasses and ResourceClaims (a :class:`~coordinator.inventory.dra.DraStore`)
overlaid with the claim allocations this coordinator decided and has not seen on the claim watch
yet (:meth:`ClusterView.hold_claims`): a decided allocation counts from the decision until the
watch shows the claim allocated (or deleted), or it is released with its pod (bind or claim
write failed, pod gone). Every DRA change calls ``on_dra_change`` (pods waiting for a claim or
for devices are tried again). Without DRA objects this costs nothing: the state is one shared
empty one.

GPU assignments survive a coordinator restart because bound pods carry
``topos.io/assigned-gpus`` / ``topos.io/assigned-numa``: the inventory keeps those annotations and
:func:`~coordinator.core.snapshot.podinfo.bound_pod_info` (the one bound-pod converter) turns
them into the devices the pod holds.
"""

from __future__ import annotations

import itertools
import logging
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Final

from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.dra.state import DraState
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement, PodInfo, bound_pod_info
from coordinator.core.snapshot.podrun import PodRun
from coordinator.core.snapshot.snapshot import PodChange, Snapshot
from coordinator.core.snapshot.volumes import Volumes
from coordinator.core.snapshot.workloads import WorkloadSelectors
from coordinator.inventory.dra import DraChange, DraStore, claim_allocated
from coordinator.inventory.state import BoundPod, NodeState
from coordinator.inventory.store import Inventory, InventoryEvent

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_ASSUME_TTL_S", "Assumed", "ClusterView", "node_info"]

#: How long a pod whose bind succeeded stays assumed when the inventory never shows it bound.
#: A last-resort safety net only (kube-scheduler has the same one): the bind showing up on the
#: watch, the pod's deletion or a new pod under its name all release the room at once.
DEFAULT_ASSUME_TTL_S: Final = 30.0
#: Stands in :meth:`ClusterView._patch` for a pod that came, until it is converted.
_COMING: Final = PodInfo("", "")


def _node_part(state: NodeState) -> tuple[object, ...]:
    """What :func:`node_info` reads of a node besides its pods."""
    return (
        state.labels,
        state.allocatable,
        state.taints,
        state.unschedulable,
        state.ready is not False,
        state.stale,
        state.topology,
        state.cached_models,
    )


def node_info(state: NodeState, pods: tuple[PodInfo, ...]) -> NodeInfo:
    """One inventory node as a scheduling ``NodeInfo``."""
    return NodeInfo.build(
        state.name,
        labels=state.labels,
        allocatable=state.allocatable,
        taints=tuple(Taint(t.key, t.value or "", t.effect) for t in state.taints),
        unschedulable=state.unschedulable,
        ready=state.ready is not False,
        stale=state.stale,
        topology=state.topology,
        pods=pods,
        cached_models=state.cached_models,
    )


@dataclass(frozen=True, slots=True)
class Assumed:
    """A pod placed by this coordinator whose binding the inventory has not shown yet."""

    key: str  # namespace/name, for messages
    uid: str  # the identity (``pod.uid``, or the name for a pod without one)
    node: str
    info: PodInfo
    bound_at: float | None = None  # monotonic time the bind succeeded; None: in flight


class ClusterView:
    """Incremental snapshots of one inventory, plus assumptions. Event-loop only."""

    def __init__(
        self,
        inventory: Inventory,
        *,
        assume_ttl_s: float = DEFAULT_ASSUME_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        node_filter: Callable[[NodeState], bool] | None = None,
        dra: DraStore | None = None,
        workloads: WorkloadSelectors | None = None,
        volumes: Volumes | None = None,
    ) -> None:
        self.inventory = inventory
        self.dra = dra if dra is not None else DraStore()
        self._claims: dict[str, tuple[ClaimAllocation, ...]] = {}  # uid → allocations in flight
        self._claims_version = 0
        self._dra_key: tuple[int, int] = (-1, -1)
        self._dra_state: DraState = self.dra.state()
        self._snapshot_dra: DraState | None = None  # what the cached snapshot was given
        #: Called on every change of a watched DRA object.
        self.on_dra_change: Callable[[bool], None] = lambda frees: None
        self._node_filter = node_filter
        self.assume_ttl_s = assume_ttl_s
        self._clock = clock
        self.namespaces: dict[str, Mapping[str, str]] = dict(namespaces or {})
        #: Services and controllers by selector (default topology spreading); the adapters
        #: keep it current and every snapshot reads it as it is.
        self.workloads = workloads if workloads is not None else WorkloadSelectors()
        #: PersistentVolumeClaims, PersistentVolumes and StorageClasses (VolumeBinding), kept
        #: current likewise; every change calls its ``on_change``.
        self.volumes = volumes if volumes is not None else Volumes()
        #: From the inventory alone, with what of the node (besides its pods) it was built from.
        self._base: dict[str, tuple[tuple[object, ...], NodeInfo]] = {}
        #: The base's pods by uid, in its order (nodes with a base): kept in step one pod at a
        #: time when only pods came, changed or left (see :meth:`_patch`).
        self._on_node: dict[str, dict[str, PodInfo]] = {}
        self._effective: dict[str, NodeInfo] = {}  # base + assumed pods
        self._extras: dict[str, tuple[PodInfo, ...]] = {}  # node → the assumed pods it adds
        self._pods: dict[str, tuple[BoundPod, PodInfo]] = {}  # uid → cached conversion
        #: Assumptions the watch just confirmed (uid → the assumed pod), until the next snapshot
        #: converts the bound pod: an equal conversion is this very object (see :meth:`_pod`).
        self._confirmed: dict[str, PodInfo] = {}
        self._dirty: set[str] = set(inventory.names())  # inventory changed: rebuild
        #: Nodes whose pods alone changed since their base was built: the inventory's events
        #: that say which (a pod came, changed in place or left), replayed on the base.
        self._touched: dict[str, list[InventoryEvent]] = {}
        self._held_dirty: set[str] = set()  # only the assumptions changed: base + held again
        self._assumed: dict[str, Assumed] = {}  # uid → assumption
        #: node → the pods assumed there (uid → what it holds), in their order
        self._by_node: dict[str, dict[str, PodInfo]] = {}
        #: node → assumed uids the inventory showed bound there when they were assumed
        self._bound_first: dict[str, set[str]] = {}
        self._next_expiry = float("inf")  # earliest TTL deadline of a bound assumption
        #: Called when held room is released without the inventory taking it over: with the
        #: pod assumed there, or ``None`` (claims or several pods released).
        self.on_release: Callable[[PodInfo | None], None] = lambda _: None
        self._snapshot: Snapshot | None = None
        self._order_changed = True
        self._unsubscribe = inventory.subscribe(self._on_event)
        self._unsubscribe_dra = self.dra.subscribe(self._on_dra)

    def close(self) -> None:
        self._unsubscribe()
        self._unsubscribe_dra()

    # --- inventory changes -------------------------------------------------------------------

    def _on_event(self, event: InventoryEvent) -> None:
        name = event.node
        one_pod = (event.came, event.changed_in_place, event.left) != (None, None, None)
        if event.pods_only and one_pod and name not in self._dirty:
            self._touched.setdefault(name, []).append(event)
        else:
            self._dirty.add(name)
            self._touched.pop(name, None)
        if event.kind in ("added", "removed"):
            self._order_changed = True
        held = self._by_node.get(name)
        if not held:
            return
        # The watch caught up: pods the inventory now shows bound are counted there, so their
        # assumptions end now (their deletion then frees the room at once). After one pod's
        # event only that pod can have been shown bound since the last event, besides those
        # bound there before they were assumed (``_bound_first``): a node's held pods can be
        # many (binds in flight to a DaemonSet's node), each looked at once, not per event.
        if event.pods_only and one_pod:
            first = self._bound_first.get(name)
            uids: tuple[str, ...] = (
                *(
                    u
                    for u in (event.came.uid if event.came else None, event.changed_in_place)
                    if u is not None and u in held
                ),
                *(first or ()),
            )
        else:
            uids = tuple(held)
        inventory = self.inventory
        for uid in uids:
            bound = inventory.bound_pod(uid)
            if bound is None or bound.node != name:
                continue
            found = self._drop(uid)
            if found is not None:
                self._confirmed[uid] = found.info

    # --- assumptions -------------------------------------------------------------------------

    @staticmethod
    def _uid(pod: PodRequest) -> str:
        return pod.uid or pod.key

    def assume(
        self,
        pod: PodRequest,
        node: str,
        placement: Placement,
        claims: tuple[ClaimAllocation, ...] = (),
    ) -> None:
        """Hold ``placement`` on ``node`` for ``pod`` until its bind is confirmed or released,
        and its DRA ``claims`` until the claim watch shows them allocated."""
        uid = self._uid(pod)
        if uid in self._assumed:
            raise ValueError(f"pod {pod.key} is already assumed on {self._assumed[uid].node}")
        info = PodInfo.from_request(pod, placement)
        self._assumed[uid] = Assumed(pod.key, uid, node, info)
        self._by_node.setdefault(node, {})[uid] = info
        bound = self.inventory.bound_pod(uid)
        if bound is not None and bound.node == node:
            self._bound_first.setdefault(node, set()).add(uid)
        self._held_dirty.add(node)
        if claims:
            self.hold_claims(uid, claims)

    # --- DRA claims in flight ------------------------------------------------------------------

    def hold_claims(self, uid: str, claims: tuple[ClaimAllocation, ...]) -> None:
        """Count ``claims`` as allocated for pod ``uid`` (replacing what was held for it: the
        claims as written, extended-resource claims now named). Claims the watch already shows
        allocated (shared ones, ours from before a restart, or written and seen already) and
        reserve-only writes are counted by the store and not held."""
        seen = self.dra.raw
        claims = tuple(
            c
            for c in claims
            if c.results and not (c.name and claim_allocated(seen("ResourceClaim", c.key)))
        )
        if claims:
            self._claims[uid] = claims
        elif self._claims.pop(uid, None) is None:
            return
        self._claims_version += 1

    def claims_written(self, uid: str, written: tuple[ClaimAllocation, ...]) -> None:
        """The claims of pod ``uid`` as written (created ones named)."""
        if uid in self._claims:  # else released meanwhile (the pod is gone)
            self.hold_claims(uid, written)

    def held_claims(self, uid: str) -> tuple[ClaimAllocation, ...]:
        """The allocations held for pod ``uid`` (decided, not yet seen on the claim watch)."""
        return self._claims.get(uid, ())

    @property
    def claims_in_flight(self) -> int:
        return sum(len(c) for c in self._claims.values())

    def _release_claims(self, uid: str) -> bool:
        if self._claims.pop(uid, None) is None:
            return False
        self._claims_version += 1
        return True

    def _on_dra(self, change: DraChange) -> None:
        if (
            change.kind == "ResourceClaim"
            and self._claims
            and (change.obj is None or claim_allocated(change.obj))
        ):
            # The watch caught up (or the claim is gone): the store counts it from now on.
            for uid, held in tuple(self._claims.items()):
                kept = tuple(c for c in held if not c.name or c.key != change.key)
                if len(kept) != len(held):
                    self.hold_claims(uid, kept)
        self.on_dra_change(change.frees)

    def _dra(self) -> DraState:
        """The watched DRA objects with the allocations in flight counted."""
        base = self.dra.state()
        if not self._claims:
            return base
        key = (self.dra.version, self._claims_version)
        if key != self._dra_key:
            held = [c for claims in self._claims.values() for c in claims]
            self._dra_state = base.with_allocations(held)
            self._dra_key = key
        return self._dra_state

    def _drop(self, uid: str) -> Assumed | None:
        found = self._assumed.pop(uid, None)
        if found is None:
            return None
        held = self._by_node.get(found.node)
        if held is not None:
            held.pop(uid, None)
            if not held:
                del self._by_node[found.node]
        first = self._bound_first.get(found.node)
        if first is not None:
            first.discard(uid)
            if not first:
                del self._bound_first[found.node]
        self._held_dirty.add(found.node)
        return found

    def release(self, uid: str) -> bool:
        """Free the room held for pod ``uid`` (bind failed, pod deleted or replaced); False if
        none was held."""
        claims = self._release_claims(uid)
        found = self._drop(uid)
        if found is None and not claims:
            return False
        self.on_release(None if claims or found is None else found.info)
        return True

    def bind_done(self, uid: str) -> None:
        """The bind call succeeded: hold the room until the inventory shows the pod."""
        found = self._assumed.get(uid)
        if found is not None and found.bound_at is None:
            now = self._clock()
            self._assumed[uid] = Assumed(found.key, found.uid, found.node, found.info, now)
            self._next_expiry = min(self._next_expiry, now + self.assume_ttl_s)

    def held(self, uid: str) -> Assumed | None:
        """The assumption of pod ``uid``, if room is held for it."""
        return self._assumed.get(uid)

    @property
    def assumed_count(self) -> int:
        return len(self._assumed)

    def next_expiry_in(self) -> float | None:
        """Seconds until the safety net may release a bound assumption (``None``: none held)."""
        if self._next_expiry == float("inf"):
            return None
        return max(0.0, self._next_expiry - self._clock())

    def expire(self) -> int:
        """The safety net: release bound assumptions the inventory never showed within
        ``assume_ttl_s`` (a watch that missed the pod). Returns how many."""
        now = self._clock()
        if now < self._next_expiry:
            return 0
        expired = [
            a
            for a in self._assumed.values()
            if a.bound_at is not None and now - a.bound_at > self.assume_ttl_s
        ]
        for a in expired:
            log.warning(
                "pod %s (uid %s) was bound to %s %.0fs ago and never showed up there; "
                "releasing its room",
                a.key,
                a.uid,
                a.node,
                now - (a.bound_at or now),
            )
            self._drop(a.uid)
            self._release_claims(a.uid)
        self._next_expiry = min(
            (a.bound_at + self.assume_ttl_s for a in self._assumed.values() if a.bound_at),
            default=float("inf"),
        )
        if expired:
            self.on_release(None)
        return len(expired)

    # --- snapshots ---------------------------------------------------------------------------

    def _pod(self, bound: BoundPod) -> PodInfo:
        cached = self._pods.get(bound.uid)
        if cached is not None and (cached[0] is bound or cached[0] == bound):
            return cached[1]
        info = bound_pod_info(bound)
        assumed = self._confirmed.pop(bound.uid, None)
        if cached is not None and cached[1] == info:
            # Changed in what scheduling does not read (it started): the same PodInfo, so the
            # node is extended rather than rebuilt and the snapshot re-indexes nothing for it.
            info = cached[1]
        elif assumed is not None and assumed == info:
            # The bind seen, as it was assumed: the assumed PodInfo, so the node as assumed
            # (base + this pod) is the new base as it stands (see :meth:`_rebuild`).
            info = assumed
        self._pods[bound.uid] = (bound, info)
        return info

    def _rebuild(self, name: str) -> NodeInfo | None:
        """The node's base from the inventory (``None``: not a node to schedule onto). When
        only pods were added since the base was last built (a bind seen), they are added to it
        (:meth:`NodeInfo.adding`) instead of building it afresh."""
        state = self.inventory.scheduling_node(name)
        bound = self.inventory.bound_pods(name) if state is not None else ()
        uids = [b.uid for b in bound]
        before = self._on_node.pop(name, None)
        if before is not None:
            for gone in before.keys() - set(uids):
                self._pods.pop(gone, None)
        if state is None or not self.schedules_onto(state):
            # Gone, no Node object (the API server decides which nodes exist, whatever an agent
            # reports: such a node is no target and not one of "0/N nodes"), or not ours to fill.
            self._base.pop(name, None)
            return None
        pods = tuple(self._pod(b) for b in bound)
        on_node = dict(zip(uids, pods, strict=True))
        if len(on_node) == len(pods):  # else uids repeat (pods made by hand): always rebuilt
            self._on_node[name] = on_node
        part = _node_part(state)
        cached = self._base.get(name)
        effective = self._effective.get(name)
        if cached is not None and cached[0] == part and _extends(pods, cached[1].pod_run):
            if (
                effective is not None
                and len(effective.pod_run) == len(pods)
                and _extends(pods, effective.pod_run)
            ):
                # The watch confirmed what was assumed there, nothing else: the node as assumed,
                # its memos kept (equal to ``cached.adding(…)``, built from the same pods).
                base = effective
            else:
                base = cached[1].adding(pods[len(cached[1].pod_run) :])
        else:
            base = node_info(state, pods)
        self._base[name] = (part, base)
        return base

    def _patch(self, name: str, events: list[InventoryEvent]) -> tuple[NodeInfo, PodChange] | None:
        """The node's base when only its pods came, changed or left since it was built
        (``events`` name each), and what changed: the cached base with those pods taken out and
        put in, in the inventory's order, with no walk over the node's other pods (a
        DaemonSet's node holds thousands). ``None``: it is rebuilt instead (no base yet, the
        node itself changed, its agent reports which devices its pods hold)."""
        cached = self._base.get(name)
        on_node = self._on_node.get(name)
        inventory = self.inventory
        if cached is None or on_node is None or inventory.reports_holdings(name):
            return None
        state = inventory.scheduling_node(name)
        if state is None or not self.schedules_onto(state) or _node_part(state) != cached[0]:
            return None
        # Replayed as the inventory applied them, so the order is its own: a pod that came is
        # last, one changed in place keeps its place. ``fresh``: converted below (uid → the
        # base's version, if it had one).
        fresh: dict[str, PodInfo | None] = {}
        left: list[PodInfo] = []
        for event in events:
            if event.left is not None:
                uid = event.left.uid
                was = on_node.pop(uid, None)
                if was is not None and was is not _COMING:
                    left.append(was)
                fresh.pop(uid, None)
                if inventory.bound_pod(uid) is None:
                    self._pods.pop(uid, None)
            if event.came is not None:
                uid = event.came.uid
                was = on_node.pop(uid, None)
                if was is not None and was is not _COMING:
                    left.append(was)
                on_node[uid] = _COMING
                fresh[uid] = None
            elif event.changed_in_place is not None:
                uid = event.changed_in_place
                was = on_node.get(uid)
                if was is None:
                    return None  # not seen come: rebuilt
                if uid not in fresh:
                    fresh[uid] = None if was is _COMING else was
        came: list[PodInfo] = []
        for uid, was in fresh.items():
            bound = inventory.bound_pod(uid)
            if bound is None or bound.node != name or bound.held_gpus:
                return None  # the events and the inventory disagree: rebuilt
            info = self._pod(bound)
            on_node[uid] = info
            if info is not was:  # else changed in what scheduling does not read (it started)
                came.append(info)
                if was is not None:
                    left.append(was)
        base = cached[1]
        if left:
            base = base.with_pods(PodRun.of_list([*on_node.values()]), left=left, came=came)
        elif came:  # only pods new here, last in the order: added to the base
            effective = self._effective.get(name)
            if effective is not None and _same(effective.pod_run.after(len(base.pod_run)), came):
                base = effective  # the binds of what was assumed there seen: its memos kept
            else:
                base = base.adding(came)
        self._base[name] = (cached[0], base)
        return base, (left, came)

    def _extra(self, name: str, base: NodeInfo) -> tuple[PodInfo, ...]:
        """The pods assumed on ``name`` that ``base`` (the inventory's) does not count yet."""
        held = self._by_node.get(name)
        if not held:
            return ()
        present = self._on_node.get(name)
        counted: AbstractSet[str] = (
            present.keys() if present is not None else {p.uid for p in base.pods if p.uid}
        )
        if counted.isdisjoint(held):
            return tuple(held.values())
        # Those the inventory counts already left out (no Python-level loop: held can be many).
        return tuple(map(held.__getitem__, itertools.filterfalse(counted.__contains__, held)))

    def _effective_node(
        self, name: str, base: NodeInfo, change: PodChange | None
    ) -> tuple[NodeInfo, PodChange | None]:
        """The node as the scheduler sees it — ``base`` with the pods assumed there that it
        does not count yet — and, given what changed in the base (``change``; ``None``: not
        known), which pods left and came since the node as it was."""
        extra = self._extra(name, base)
        before = self._extras.pop(name, ())
        if extra:
            self._extras[name] = extra
        was = self._effective.get(name)
        if change is None or was is None:
            return base.adding(extra), None
        now = (*change[1], *extra)
        if not change[0] and _same(now[: len(before)], before):
            # Binds seen of what was assumed, in order, and pods assumed since: the node as it
            # was with those pods added.
            added = now[len(before) :]
            return was.adding(added), ((), added)
        left, came = _net((*change[0], *before), now)
        if was.topology is None:  # worked out from the node as it was (no walk over its pods)
            pods = base.pod_run.joined(extra)  # the base's list left to the base
            return was.with_pods(pods, left=left, came=came), (left, came)
        return base.adding(extra), (left, came)

    def snapshot(self) -> Snapshot:
        """The current snapshot. Shared between calls: treat it as read-only, :meth:`copy` it
        for what-if runs."""
        self.expire()
        if (
            not self._dirty
            and not self._touched
            and not self._held_dirty
            and not self._order_changed
            and self._snapshot is not None
        ):
            self._set_dra(self._snapshot)
            return self._snapshot
        dirty, self._dirty = self._dirty, set()
        touched, self._touched = self._touched, {}
        held, self._held_dirty = self._held_dirty - dirty - touched.keys(), set()
        kept: set[str] = set()  # the snapshot has these nodes as they are (a bind confirmed)
        changes: dict[str, PodChange] = {}  # node → the pods that left and came, where known
        for name in dirty | touched.keys():
            patched = None if name in dirty else self._patch(name, touched[name])
            base, change = (self._rebuild(name), None) if patched is None else patched
            if base is None:
                if self._effective.pop(name, None) is not None:
                    self._order_changed = True
                self._extras.pop(name, None)
                continue
            before = self._effective.get(name)
            if before is None:
                self._order_changed = True
            effective, change = self._effective_node(name, base, change)
            if effective is before:
                kept.add(name)
            elif change is not None:
                changes[name] = change
            self._effective[name] = effective
        self._confirmed.clear()  # converted above, or their node is gone
        for name in held:
            # Only an assumption came or went: the inventory's part is as it was, and the
            # assumed pods are added to the cached base.
            cached = self._base.get(name)
            if cached is not None and name in self._effective:  # else gone, or not ours
                effective, change = self._effective_node(name, cached[1], ((), ()))
                if change is not None:
                    changes[name] = change
                self._effective[name] = effective
        dirty = (dirty | touched.keys() | held) - kept
        if self._order_changed or self._snapshot is None:
            ordered = sorted(self._effective)
            self._snapshot_dra = self._dra()
            self._snapshot = Snapshot(
                (self._effective[n] for n in ordered),
                namespaces=self.namespaces,
                dra=self._snapshot_dra,
                workloads=self.workloads,
                volumes=self.volumes,
            )
            self._order_changed = False
        else:
            for name in dirty:
                info = self._effective.get(name)
                if info is not None:
                    self._snapshot.replace(info, changes.get(name))
            self._set_dra(self._snapshot)
        return self._snapshot

    def _set_dra(self, snapshot: Snapshot) -> None:
        """Hand the snapshot a new DRA state only when it changed (the snapshot revisits its
        nodes on every new state)."""
        state = self._dra()
        if state is not self._snapshot_dra:
            self._snapshot_dra = state
            snapshot.dra = state

    def schedules_onto(self, state: NodeState) -> bool:
        """Whether a node (the inventory's view of it) is one this scheduler places pods on: it has
        a Node object and passes :attr:`node_filter`."""
        return state.ready is not None and (self._node_filter is None or self._node_filter(state))

    @property
    def node_filter(self) -> Callable[[NodeState], bool] | None:
        """Which inventory nodes the scheduler may use (``None``: all)."""
        return self._node_filter

    @node_filter.setter
    def node_filter(self, value: Callable[[NodeState], bool] | None) -> None:
        self._node_filter = value
        self._dirty.update(self.inventory.names())
        self._touched.clear()
        self._effective.clear()
        self._extras.clear()
        self._base.clear()
        self._order_changed = True

    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        """Namespace labels for affinity ``namespaceSelector``s (``None``: deleted)."""
        if labels is None:
            self.namespaces.pop(name, None)
        else:
            self.namespaces[name] = dict(labels)
        self._order_changed = True


def _net(left: Sequence[PodInfo], came: Sequence[PodInfo]) -> PodChange:
    """``left`` and ``came`` less the pods in both (the same object: it stayed)."""
    if not left or not came:
        return left, came
    stayed = set(map(id, left)).intersection(map(id, came))
    if not stayed:
        return left, came
    return [p for p in left if id(p) not in stayed], [p for p in came if id(p) not in stayed]


def _same(pods: Sequence[PodInfo], before: Sequence[PodInfo]) -> bool:
    """The same pods (the same objects) in the same order."""
    return len(pods) == len(before) and all(map(operator.is_, pods, before))


def _extends(pods: tuple[PodInfo, ...], before: PodRun) -> bool:
    """``pods`` are ``before`` (the same objects: unchanged) followed by new ones."""
    return len(pods) >= len(before) and all(map(operator.is_, pods, before))
