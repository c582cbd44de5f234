"""Recovery, executed: when hardware under running pods fails, move each affected gang as a whole,
with the fewest moves.

Failures come from the inventory: a GPU its agent reports unhealthy (XID, lost) while a pod holds
it (``topos.io/assigned-gpus``), a node whose Node object turns NotReady, a node whose agent is
silent past the TTL (stale), a node whose Node object was deleted while pods are still bound to
it. For new failures,
:func:`~coordinator.core.gangs.recovery.plan_recovery` decides per affected unit (a gang with
all its running members, or a lone pod):

- ``partial`` — only the members on failed hardware move, into the leaves the gang already uses;
- ``whole`` — the whole gang moves together by the usual network rules;
- ``wait`` — every member is released and the gang waits whole.

Here every pod the plan lists is evicted through the Eviction API with a ``Rescheduled`` Event
that says why — for the pod decided on only (its UID is the eviction's precondition), and at once
(grace period 0) where its Node was deleted, since no kubelet is left to stop it and confirm, as
kube-controller-manager's PodGC deletes such pods — and the gang step is told where the
replacements should go (the plan's nodes). The controllers that own the pods (Job, StatefulSet,
JobSet, …) create the replacements; they arrive as members of the same gang, and the gang step
plans them together, inside that scope. A pod that no controller would create again (no
controller ``ownerReference``), lone or a gang member, is not evicted unless its Node was deleted:
an eviction would delete it for good (and a gang of such pods would lose every member a move
planned). It stays with a ``NotRescheduled`` Warning Event where it sits on the failed hardware,
and the node's own NoExecute taints evict it after its tolerations, as they would any pod.
When every member is bound again, the time from the failure is logged, kept for
``GET /v1/gangs`` and reported in a ``GangScheduled`` Event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Final

from common import podkeys
from coordinator.core.domains.capacity import node_states
from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.strategy import PlacementIntent
from coordinator.core.gangs.cycle import with_share_milli
from coordinator.core.gangs.identity import GangKey
from coordinator.core.gangs.plan import gang_intent
from coordinator.core.gangs.recovery import RecoveryPlan, plan_recovery, share_room
from coordinator.engine.gangs.running import bound_gang, bound_pods, running_pods
from coordinator.engine.gangs.step import GangStep
from coordinator.engine.ports import PodRef
from coordinator.inventory.store import InventoryEvent

log = logging.getLogger(__name__)

__all__ = ["REASON_LEFT", "REASON_RESCHEDULED", "Recovery"]

REASON_RESCHEDULED: Final = "Rescheduled"
#: A lone pod with no controller on failed hardware, left where it is (eviction would delete it).
REASON_LEFT: Final = "NotRescheduled"


class Recovery:
    """Event-loop only. :meth:`run` in a task; it wakes on inventory changes."""

    def __init__(
        self,
        step: GangStep,
        *,
        keys: DomainKeys | None = None,
        clock: Callable[[], float] = time.monotonic,
        settle_s: float = 0.05,
        namespace: str | None = None,
    ) -> None:
        self.step = step
        self.scheduler = step.scheduler
        self.keys = keys
        self.namespace = namespace
        """Only pods of this namespace are moved (the scheduler's ``namespace``); ``None``: all."""
        self._clock = clock
        self._settle_s = settle_s
        self._dirty: set[str] = set()
        self._wakeup = asyncio.Event()
        self._failed_nodes: dict[str, str] = {}  # node → cause, already handled
        self._failed_gpus: dict[str, set[str]] = {}  # node → GPU UUIDs already handled
        self._deleted: set[str] = set()  # nodes whose Node object is gone, pods still bound
        self._evicted: dict[str, float] = {}  # pod → when we asked it to go
        self.plans: list[RecoveryPlan] = []
        #: Told the failed nodes under each unit it moves (HistoricalPerformance's history).
        self.listeners: list[Callable[[Iterable[str]], None]] = []
        self._unsubscribe = self.scheduler.inventory.subscribe(self._on_event)

    def close(self) -> None:
        self._unsubscribe()

    def _on_event(self, event: InventoryEvent) -> None:
        self._dirty.add(event.node)
        self._wakeup.set()

    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            await asyncio.sleep(self._settle_s)  # let a burst of changes land together
            # Recovery evicts: only the leader does, and a replica that becomes leader looks at
            # what failed meanwhile (the changes stay marked until then).
            await self.scheduler.leadership.wait_until_leading()
            self._wakeup.clear()
            try:
                self.check()
            except Exception:
                log.exception("recovery check failed")

    # --- what failed ----------------------------------------------------------------------------

    def _ours(self, namespace: str) -> bool:
        """A coordinator scheduling one namespace leaves other namespaces' pods alone."""
        return self.namespace is None or namespace == self.namespace

    def _failures(self, names: set[str]) -> tuple[dict[str, str], dict[str, set[str]]]:
        """New node failures (node → cause) and new GPU failures under pods (node → UUIDs)."""
        inventory = self.scheduler.inventory
        nodes: dict[str, str] = {}
        gpus: dict[str, set[str]] = {}
        for name in names:
            # Readiness, staleness and GPU health only: the scheduler's view of the node (built
            # once per change and shared with the snapshot), not the display view with who holds
            # each device, rebuilt here for every node a bind touched.
            state = inventory.scheduling_node(name)
            if state is None:
                self._failed_nodes.pop(name, None)
                self._failed_gpus.pop(name, None)
                self._deleted.discard(name)
                continue
            cause = None
            # Its pods only where they matter (a node deleted, GPUs failed): every node a bind
            # touched comes here, and a DaemonSet's node holds thousands.
            bound = inventory.bound_pods(name) if state.ready is None else ()
            # No Node object but pods still bound to it: the Node was deleted (recovery runs only
            # once the inventory is listed, so "not listed yet" is not mistaken for it).
            deleted = state.ready is None and any(self._ours(p.namespace) for p in bound)
            if deleted:
                cause = f"node {name} was deleted (its Node object is gone)"
                self._deleted.add(name)
            else:
                self._deleted.discard(name)
                if state.ready is False:
                    cause = f"node {name} is NotReady"
                elif state.stale:
                    cause = f"the agent on node {name} is silent past its TTL"
                if cause is not None and name not in self._failed_nodes:
                    # Nothing of ours on it, nothing to plan (a Node made NotReady, before its
                    # kubelet reports, is every new node): looked at again when a pod binds there.
                    bound = inventory.bound_pods(name)
                    if not any(self._ours(p.namespace) for p in bound):
                        cause = None
            if cause is None:
                self._failed_nodes.pop(name, None)
            elif name not in self._failed_nodes or (deleted and self._failed_nodes[name] != cause):
                # A node deleted after it failed otherwise is a new failure: what was evicted
                # there with a grace period waits for a kubelet that is gone, and goes again now.
                self._failed_nodes[name] = cause
                nodes[name] = cause
                if deleted:
                    for p in bound:
                        self._evicted.pop(f"{p.namespace}/{p.name}", None)
            bad: set[str] = set()
            if state.topology is not None:
                bad = {g.uuid for g in state.topology.gpus if not g.healthy}
            handled = self._failed_gpus.setdefault(name, set())
            handled &= bad  # a GPU that came back is watched again
            if not bad:
                continue  # (every node a bind touched comes here: no pod's GPUs to look at)
            bound = bound or inventory.bound_pods(name)
            held = {u for p in bound if self._ours(p.namespace) for u in p.assigned_gpus}
            new = (bad & held) - handled
            if new:
                handled |= new
                gpus[name] = new
        return nodes, gpus

    def check(self) -> RecoveryPlan | None:
        """Look at changed nodes; plan and start recovery for new failures."""
        names, self._dirty = self._dirty, set()
        now = self._clock()
        for pod, when in tuple(self._evicted.items()):
            if now - when > 300:
                del self._evicted[pod]
        new_nodes, new_gpus = self._failures(names)
        if not new_nodes and not new_gpus:
            return None
        inventory = self.scheduler.inventory
        podgroups = self.step.podgroups
        running = [
            p
            for p in running_pods(inventory, podgroups)
            if p.key not in self._evicted and self._ours(p.key.partition("/")[0])
        ]
        intents: dict[str, PlacementIntent] = {}
        annotations: dict[str, list[dict[str, str]]] = {}
        # Only pods Topos scheduled are moved: other schedulers' pods on a failed node are the
        # node lifecycle controller's business, as in any cluster.
        movable: set[str] = set()
        # A pod no controller would create again: evicting it would delete it for good.
        bare: set[str] = set()
        gpus_of: dict[str, frozenset[str]] = {}
        gang_keys: dict[str, GangKey] = {}
        for bound in bound_pods(inventory):
            if not self._ours(bound.namespace):
                continue
            key = f"{bound.namespace}/{bound.name}"
            if bound.scheduler == podkeys.SCHEDULER_NAME:
                movable.add(key)
            spec = bound_gang(bound, podgroups)
            if spec is not None:
                gang_keys[f"gang:{spec.key}"] = spec.key
                annotations.setdefault(f"gang:{spec.key}", []).append(dict(bound.annotations))
            if not bound.owner_uid:
                bare.add(key)
                gpus_of[key] = frozenset(bound.assigned_gpus)
        for gang, anns in annotations.items():
            intent = gang_intent(anns)
            if isinstance(intent, PlacementIntent):
                # A recovered gang's new places keep within topologyConstraints too.
                limits = self.scheduler.framework.config.topology_constraints
                intents[gang] = replace(intent, leaf_limits=limits)
        snapshot = self.scheduler.view.snapshot()
        nodes = node_states(snapshot)
        shares = {p.key: p.share for p in running if p.share is not None}
        if shares:  # shares move as shares: thousandths per node, one GPU with room each
            nodes = with_share_milli(nodes, snapshot)
        plan = plan_recovery(
            nodes,
            running,
            failed_nodes=set(new_nodes),
            failed_gpus=new_gpus,
            intents=intents,
            keys=self.keys,
            eligible=share_room(snapshot, shares) if shares else None,
        )
        if not plan.units:
            return None
        self.plans.append(plan)
        # Each unit is told only the failures under its own pods, not every node that failed.
        node_of = {f"{b.namespace}/{b.name}": b.node for b in bound_pods(inventory)}
        uid_of = {f"{b.namespace}/{b.name}": b.uid for b in bound_pods(inventory)}
        failed = set(new_nodes) | set(new_gpus)
        for unit in plan.units:
            hit = {node_of[p] for p in unit.evict if p in node_of}
            for listener in self.listeners:
                listener(sorted(hit & failed))
            causes = [c for n, c in sorted(new_nodes.items()) if n in hit] + [
                f"GPU {', '.join(sorted(uuids))} on node {node} is unhealthy"
                for node, uuids in sorted(new_gpus.items())
                if node in hit
            ]
            cause = "; ".join(causes) or "hardware under its pods failed"
            ours = [p for p in unit.evict if p in movable]
            # A pod no controller would create again stays (unless its Node is gone): a gang
            # of bare pods is not torn down for one broken member, nor that member deleted.
            evict = [p for p in ours if p not in bare or node_of.get(p) in self._deleted]
            for pod in ours:
                self._evicted[pod] = now
                if pod not in evict and self._on_failed(pod, node_of, gpus_of, new_nodes, new_gpus):
                    ns, _, name = pod.partition("/")
                    self._leave(PodRef(ns, name, uid_of.get(pod, "")), cause)
            if not evict:
                log.warning("recovery (%s): %s: no pod moved (no controller)", cause, unit.unit)
                continue
            log.warning("recovery (%s): %s", cause, unit.message)
            gang_key = gang_keys.get(unit.unit)
            if gang_key is not None:
                self.step.recovery_started(
                    gang_key, cause=cause, scope=(node for _, node in unit.moves)
                )
            message = f"{cause}: {unit.message}"
            for pod in evict:
                ns, _, name = pod.partition("/")
                gone = node_of.get(pod) in self._deleted  # nothing left to stop it: at once
                self._evict(PodRef(ns, name, uid_of.get(pod, "")), message, now=gone)
        return plan

    @staticmethod
    def _on_failed(
        pod: str,
        node_of: dict[str, str],
        gpus_of: dict[str, frozenset[str]],
        nodes: dict[str, str],
        gpus: dict[str, set[str]],
    ) -> bool:
        """Whether ``pod`` itself sits on the failed hardware (not a gang-mate elsewhere)."""
        node = node_of.get(pod)
        return node in nodes or bool(node in gpus and gpus_of.get(pod, frozenset()) & gpus[node])

    def _leave(self, ref: PodRef, cause: str) -> None:
        """A lone pod with no controller on failed hardware stays: a Warning Event says why."""
        message = (
            f"{cause}: this pod has no controller that would create it again, so it is not "
            "moved (an eviction would delete it for good); the node's own NoExecute taints "
            "apply to it as to any pod"
        )
        self.scheduler.write(
            self.scheduler.writer.event(
                ref, reason=REASON_LEFT, message=message, event_type="Warning"
            ),
            f"recovery leaves {ref.key}",
        )

    def _evict(self, ref: PodRef, message: str, *, now: bool) -> None:
        writer = self.scheduler.writer

        async def run() -> None:
            await writer.event(
                ref, reason=REASON_RESCHEDULED, message=message, event_type="Warning"
            )
            await writer.evict(ref, grace_period_s=0 if now else None)

        self.scheduler.write(run(), f"recover {ref.key}")
