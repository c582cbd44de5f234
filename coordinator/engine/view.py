"""The inventory as the scheduling core sees it: a :class:`~coordinator.core.Snapshot` of
:class:`~coordinator.core.NodeInfo`, kept current incrementally, plus the pods *assumed*
onto nodes whose bind is not confirmed yet.

``ClusterView`` subscribes to the inventory and marks a node dirty on every change; taking a
snapshot rebuilds only dirty nodes (a ``NodeInfo`` per node is cached until its node changes,
and a ``PodInfo`` per bound pod until that pod changes). Assumptions live here, not in the
inventory: an assumed pod counts on its node until the inventory shows it bound there (the watch
caught up), its bind fails (:meth:`ClusterView.forget`), or — bound but never seen — its
confirmation deadline passes.

GPU assignments survive a coordinator restart because bound pods carry
``topos.io/assigned-gpus`` / ``topos.io/assigned-numa``: the inventory keeps those annotations and
:func:`~coordinator.core.snapshot.podinfo.bound_pod_info` (the one bound-pod converter) turns
them into the devices the pod holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement, PodInfo, bound_pod_info
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.inventory.state import BoundPod, NodeState
from coordinator.inventory.store import Inventory, InventoryEvent

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_ASSUME_TTL_S", "Assumed", "ClusterView", "node_info"]

#: How long a pod whose bind succeeded stays assumed when the inventory never shows it bound
#: (deleted right after binding, or a watch that lags): kube-scheduler uses the same idea.
DEFAULT_ASSUME_TTL_S: Final = 30.0


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
    )


@dataclass(frozen=True, slots=True)
class Assumed:
    """A pod placed by this coordinator whose binding the inventory has not shown yet."""

    key: str
    uid: str
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
    ) -> None:
        self.inventory = inventory
        self._node_filter = node_filter
        self.assume_ttl_s = assume_ttl_s
        self._clock = clock
        self.namespaces: dict[str, Mapping[str, str]] = dict(namespaces or {})
        self._base: dict[str, NodeInfo] = {}  # from the inventory alone
        self._effective: dict[str, NodeInfo] = {}  # base + assumed pods
        self._pods: dict[str, tuple[BoundPod, PodInfo]] = {}  # uid → cached conversion
        self._node_uids: dict[str, frozenset[str]] = {}  # node → uids converted for it
        self._dirty: set[str] = set(inventory.names())
        self._assumed: dict[str, Assumed] = {}  # pod key → assumption
        self._by_node: dict[str, set[str]] = {}  # node → assumed pod keys
        self._snapshot: Snapshot | None = None
        self._order_changed = True
        self._unsubscribe = inventory.subscribe(self._on_event)

    def close(self) -> None:
        self._unsubscribe()

    # --- inventory changes -------------------------------------------------------------------

    def _on_event(self, event: InventoryEvent) -> None:
        self._dirty.add(event.node)
        if event.kind in ("added", "removed"):
            self._order_changed = True

    # --- assumptions -------------------------------------------------------------------------

    def assume(self, pod: PodRequest, node: str, placement: Placement) -> None:
        """Hold ``placement`` on ``node`` for ``pod`` until its bind is confirmed or forgotten."""
        if pod.key in self._assumed:
            raise ValueError(f"pod {pod.key} is already assumed on {self._assumed[pod.key].node}")
        info = PodInfo.from_request(pod, placement)
        self._assumed[pod.key] = Assumed(pod.key, pod.uid, node, info)
        self._by_node.setdefault(node, set()).add(pod.key)
        self._dirty.add(node)

    def forget(self, pod_key: str) -> bool:
        """Drop an assumption (bind failed, pod gone); False if there was none."""
        found = self._assumed.pop(pod_key, None)
        if found is None:
            return False
        keys = self._by_node.get(found.node)
        if keys is not None:
            keys.discard(pod_key)
            if not keys:
                del self._by_node[found.node]
        self._dirty.add(found.node)
        return True

    def bound(self, pod_key: str) -> None:
        """The bind call succeeded: keep the assumption until the inventory shows the pod."""
        found = self._assumed.get(pod_key)
        if found is not None and found.bound_at is None:
            self._assumed[pod_key] = Assumed(
                found.key, found.uid, found.node, found.info, self._clock()
            )

    def assumed(self, pod_key: str) -> Assumed | None:
        return self._assumed.get(pod_key)

    @property
    def assumed_count(self) -> int:
        return len(self._assumed)

    # --- snapshots ---------------------------------------------------------------------------

    def _pod(self, bound: BoundPod) -> PodInfo:
        cached = self._pods.get(bound.uid)
        if cached is not None and (cached[0] is bound or cached[0] == bound):
            return cached[1]
        info = bound_pod_info(bound)
        self._pods[bound.uid] = (bound, info)
        return info

    def _rebuild(self, name: str) -> NodeInfo | None:
        state = self.inventory.node(name)
        bound = self.inventory.bound_pods(name) if state is not None else ()
        uids = frozenset(b.uid for b in bound)
        for gone in self._node_uids.get(name, frozenset()) - uids:
            self._pods.pop(gone, None)
        self._node_uids[name] = uids
        if (
            state is None
            or (state.ready is None and state.topology is None)
            or (self._node_filter is not None and not self._node_filter(state))
        ):
            # Gone, only pods known there (no Node object, no agent), or not ours to fill.
            self._base.pop(name, None)
            return None
        base = node_info(state, tuple(self._pod(b) for b in bound))
        self._base[name] = base
        return base

    def _effective_node(self, name: str, base: NodeInfo) -> NodeInfo:
        keys = self._by_node.get(name)
        if not keys:
            return base
        present = {p.uid for p in base.pods if p.uid}
        now = self._clock()
        extra: list[PodInfo] = []
        for key in sorted(keys):
            a = self._assumed[key]
            if a.uid and a.uid in present:
                self._confirmed(key)  # the watch caught up: the inventory counts it now
                continue
            if a.bound_at is not None and now - a.bound_at > self.assume_ttl_s:
                log.info("assumed pod %s never showed up bound on %s; forgetting it", key, name)
                self._confirmed(key)
                continue
            extra.append(a.info)
        return base.rebuild((*base.pods, *extra)) if extra else base

    def _confirmed(self, key: str) -> None:
        a = self._assumed.pop(key)
        keys = self._by_node.get(a.node)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_node[a.node]

    def snapshot(self) -> Snapshot:
        """The current snapshot. Shared between calls: treat it as read-only, :meth:`copy` it
        for what-if runs."""
        # Nodes with bound-but-unconfirmed assumptions may need their TTL checked.
        if self._assumed:
            now = self._clock()
            for a in self._assumed.values():
                if a.bound_at is not None and now - a.bound_at > self.assume_ttl_s:
                    self._dirty.add(a.node)
        if not self._dirty and not self._order_changed and self._snapshot is not None:
            return self._snapshot
        dirty, self._dirty = self._dirty, set()
        for name in dirty:
            base = self._rebuild(name)
            if base is None:
                if self._effective.pop(name, None) is not None:
                    self._order_changed = True
                continue
            if name not in self._effective:
                self._order_changed = True
            self._effective[name] = self._effective_node(name, base)
        if self._order_changed or self._snapshot is None:
            ordered = sorted(self._effective)
            self._snapshot = Snapshot(
                (self._effective[n] for n in ordered), namespaces=self.namespaces
            )
            self._order_changed = False
        else:
            for name in dirty:
                info = self._effective.get(name)
                if info is not None:
                    self._snapshot.replace(info)
        return self._snapshot

    @property
    def node_filter(self) -> Callable[[NodeState], bool] | None:
        """Which inventory nodes the scheduler may use (``None``: all)."""
        return self._node_filter

    @node_filter.setter
    def node_filter(self, value: Callable[[NodeState], bool] | None) -> None:
        self._node_filter = value
        self._dirty.update(self.inventory.names())
        self._effective.clear()
        self._base.clear()
        self._order_changed = True

    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        """Namespace labels for affinity ``namespaceSelector``s (``None``: deleted)."""
        if labels is None:
            self.namespaces.pop(name, None)
        else:
            self.namespaces[name] = dict(labels)
        self._order_changed = True
