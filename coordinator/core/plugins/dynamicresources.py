"""DynamicResources: allocate a pod's ResourceClaims (and the claim KEP-5004 makes for extended
resources DRA serves) on each node, choosing GPUs by topology.

PreFilter resolves the pod's claims (``spec.resourceClaims``, created from templates or not) and
checks what is wrong whatever the node: a template claim not created yet, a claim or DeviceClass
missing, a selector that does not compile. Filter allocates on the node
(:func:`~coordinator.core.dra.allocator.allocate`); a selector that fails on a device at run
time is an ``Error`` status, which ends the pod's attempt with kube-scheduler's ``running
"DynamicResources" filter plugin: …`` message; devices that are GPUs the node's agent
reported (joined by the ``uuid`` attribute, else by ``resource.kubernetes.io/pciBusID``) are
chosen by :func:`~coordinator.core.plugins.placement.plan_placement` — the same GPU-set choice,
locality and NUMA policy as ``nvidia.com/gpu`` pods — among those eligible; other devices
first-fit. The chosen GPUs become the node's placement (so ``topos.io/assigned-gpus`` and
explanations read alike) and the allocations go to ``Decision.claims``. Score: the worst link
class of the GPUs chosen (a pod asking ``nvidia.com/gpu`` is scored by GpuTopology already).

Shareable GPUs (``allowMultipleAllocations``, KEP-5075) are chosen best-fit: a GPU already
shared, the one the share leaves the least capacity of, first; a fresh one only when none fits,
and then by the same GPU-set choice, so a share does not break an intact NVLink group while a
GPU outside one will do.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Final

from coordinator.core.dra.allocator import (
    AllocationFailure,
    SharedCandidate,
    allocate,
    check_claim,
)
from coordinator.core.dra.extended import dra_served, extended_claim
from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.dra.objects import Device, ResourceClaim
from coordinator.core.dra.state import DraState
from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.framework.interfaces import CLAIMS, DRA_SERVED, PLACEMENTS, Plugin, Requeue
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.plugins.gpu import link_score
from coordinator.core.plugins.placement import Plan, plan_placement
from coordinator.core.podspec.claims import ContainerExtended
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Code, Status

__all__ = ["DynamicResources"]

_PCI_BUS_ID: Final = "resource.kubernetes.io/pciBusID"


@dataclass(frozen=True, slots=True)
class _PodDra:
    state: DraState
    claims: tuple[ResourceClaim, ...]
    served: tuple[ContainerExtended, ...]


_KEY: Final = StateKey[_PodDra]("DynamicResources")


def _unresolvable(message: str) -> Status:
    return Status.unresolvable(message)


def _missing_claim(dra: DraState, namespace: str, name: str) -> Status:
    bad = dra.rejection("ResourceClaim", f"{namespace}/{name}")
    if bad is not None:
        return _unresolvable(f"resource claim {name} is invalid: {bad.message}")
    return Status.waiting(f"resource claim {name} not found")  # made later, or not seen yet


class _TopologyChooser:
    """Chooses GPUs the node's agent knows by topology; anything else first-fit."""

    def __init__(self, node: NodeInfo, pod: PodRequest) -> None:
        self.node = node
        self.pod = pod
        topo = node.topology
        self.by_uuid = {g.uuid: g.index for g in topo.gpus} if topo else {}
        self.by_bus = (
            {g.pci_bus_id.lower(): g.index for g in topo.gpus if g.pci_bus_id} if topo else {}
        )
        self.free = set(node.free_gpus)
        self.plans: list[Plan] = []
        #: no GPU the agent reported can be joined (no topology): every device first-fit
        self.joins = bool(self.by_uuid or self.by_bus)
        self.first_fit = not self.joins

    def gpu(self, device: Device) -> int | None:
        if not self.joins:
            return None
        uuid = device.attribute("uuid")
        if isinstance(uuid, str) and uuid in self.by_uuid:
            return self.by_uuid[uuid]
        bus = device.attribute(_PCI_BUS_ID)
        if isinstance(bus, str):
            return self.by_bus.get(bus.lower())
        return None

    def usable(self, device: Device) -> bool:
        if not self.joins:
            return True
        index = self.gpu(device)
        return index is None or index in self.free or device.attribute("uuid") in self.node.dra_held

    def choose(self, candidates: Sequence[Device], count: int) -> Sequence[Device] | str:
        if not self.joins:
            return candidates[:count]
        joined = {i: d for d in candidates if (i := self.gpu(d)) is not None}
        if len(joined) < count or len(joined) < len(candidates):
            return candidates[:count]  # not all GPUs the agent knows: slice order
        sub = replace(self.pod, gpus=count, mig=(), gpu_memory_min_mib=None)
        plan = plan_placement(self.node, sub, allowed=tuple(sorted(joined)))
        if isinstance(plan, Status):
            return f"no {count} of the eligible GPUs fit: {', '.join(plan.reasons)}"
        self.plans.append(plan)
        return [joined[i] for i in plan.placement.gpus]

    def choose_shared(
        self, candidates: Sequence[SharedCandidate], count: int
    ) -> Sequence[Device] | str:
        shared = sorted((c for c in candidates if c.in_use), key=lambda c: c.left)
        picked = [c.device for c in shared[:count]]
        if len(picked) == count:
            return picked
        fresh = self.choose([c.device for c in candidates if not c.in_use], count - len(picked))
        return fresh if isinstance(fresh, str) else [*picked, *fresh]

    def placement(self, gpus: Sequence[int], base: Placement | None) -> Placement:
        base = base or Placement()
        if not self.plans:
            numa = base.numa
            topo = self.node.topology
            if topo is not None and not base.numa_usage:
                numa = tuple(sorted({n for i in gpus if (n := topo.gpus[i].numa_node) is not None}))
            return replace(base, gpus=tuple(sorted(gpus)), numa=numa)
        first = self.plans[0].placement
        numa_ids = {n for p in self.plans for n in p.placement.numa} | set(base.numa)
        return replace(
            base,
            gpus=tuple(sorted(gpus)),
            numa=tuple(sorted(numa_ids)),
            numa_usage=first.numa_usage or base.numa_usage,
            exclusive_numa=first.exclusive_numa or base.exclusive_numa,
        )


class DynamicResources(Plugin):
    name = "DynamicResources"
    requeue = Requeue.DRA

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        if not pod.claims and not pod.container_extended and not pod.extended_claim:
            return SKIP
        dra = snapshot.dra
        claims: list[ResourceClaim] = []
        for entry in pod.claims:
            name = entry.resolved_name
            if not name:
                return Status.waiting(
                    f"waiting for resource claim {entry.name} (template "
                    f"{entry.template_name}) to be created"
                )
            claim = dra.claim(pod.namespace, name)
            if claim is None:
                return _missing_claim(dra, pod.namespace, name)
            claims.append(claim)
        served: tuple[ContainerExtended, ...] = ()
        if pod.extended_claim:
            claim = dra.claim(pod.namespace, pod.extended_claim)
            if claim is None:
                return _missing_claim(dra, pod.namespace, pod.extended_claim)
            claims.append(claim)
        else:
            served = dra_served(dra, pod.container_extended)
        if not claims and not served:
            return SKIP
        for claim in claims:
            if claim.allocation is None:
                bad = check_claim(dra, claim)
                if bad is not None:
                    return _unresolvable(bad.message)
        for e in served:
            probe = extended_claim(dra, pod.namespace, (e,), {})
            bad = check_claim(dra, probe.claim) if probe is not None else None
            if bad is not None:
                return _unresolvable(bad.message)
        state.write(_KEY, _PodDra(dra, tuple(claims), served))
        state.write(DRA_SERVED, frozenset(e.resource for e in served))
        state.write(CLAIMS, {})
        return SUCCESS

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        data = state.read(_KEY)
        claims = list(data.claims)
        ext = (
            extended_claim(data.state, pod.namespace, data.served, node.allocatable)
            if data.served
            else None
        )
        if ext is not None:
            claims.append(ext.claim)
        if not claims:
            return SUCCESS  # the node serves the extended resources itself (device plugin)
        chooser = _TopologyChooser(node, pod)
        # Devices chosen in slice order (no GPU of the node's agent among them), no claim to
        # create: whether they fit is all a node not chosen needs; the allocations are made for
        # the chosen node alone (the same call, so the same answer: nothing changes within a
        # cycle). Upstream's claim-template pods on 500 nodes of 10 devices: 2.2-2.4 ms of
        # cycle per pod before, 1.15 after.
        later = chooser.first_fit and ext is None
        result = allocate(
            data.state,
            claims,
            node.name,
            node.labels,
            chooser,
            pod_uid=pod.uid,
            spec_of=lambda c: ext.spec if ext is not None and c is ext.claim else None,
            extended_requests=ext.mappings if ext is not None else (),
            check_only=later,
        )
        if isinstance(result, AllocationFailure):
            if result.error:  # a selector failed at run time: the attempt stops (kube's Error)
                return Status(Code.ERROR, (result.message,))
            code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if result.unresolvable else None
            return Status(code or Code.UNSCHEDULABLE, (result.message,), detail=result.detail)
        if later:
            state.read(CLAIMS)[node.name] = functools.partial(
                _allocations, data.state, tuple(claims), node, pod
            )
            return SUCCESS
        state.read(CLAIMS)[node.name] = result
        gpus = self._gpus(data.state, chooser, result)
        if gpus:
            placements = state.read(PLACEMENTS)
            placements[node.name] = chooser.placement(gpus, placements.get(node.name))
        return SUCCESS

    @staticmethod
    def _gpus(
        dra: DraState, chooser: _TopologyChooser, allocations: Sequence[ClaimAllocation]
    ) -> list[int]:
        out: set[int] = set()
        for a in allocations:
            for r in a.results:
                if r.admin_access:
                    continue  # shared with whoever holds it; not this pod's GPU
                device = dra.device(r.device)
                index = chooser.gpu(device) if device is not None else None
                if index is not None:
                    out.add(index)
        return sorted(out)

    def candidates(
        self, state: CycleState, pod: PodRequest, snapshot: Snapshot
    ) -> Collection[str] | None:
        """An index lookup: the nodes an allocated claim's selector names (a claim shared with
        pods placed already), and, when a claim is to be allocated and needs a device of its
        own (a request without admin access), the nodes with a device no claim holds whole."""
        data = state.get(_KEY)
        if data is None or data.served:
            return None
        out: frozenset[str] | None = None
        needs = False
        for c in data.claims:
            if c.allocation is None:
                needs = needs or any(
                    not any(a.admin_access for a in r.alternatives) for r in c.requests
                )
                continue
            named = c.allocation.named_nodes()
            if named is not None:
                out = named if out is None else out & named
        free = data.state.nodes_with_free() if needs else None
        if free is None:
            return out
        return free if out is None else out & free

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        return SUCCESS if _KEY in state and pod.gpus <= 1 else SKIP

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        placement = state.read(PLACEMENTS).get(node.name)
        if placement is None:
            return 0.0
        return link_score(node, placement.gpus)


def _allocations(
    dra: DraState, claims: Sequence[ResourceClaim], node: NodeInfo, pod: PodRequest
) -> tuple[ClaimAllocation, ...]:
    """The claims' allocations on ``node``, which the cycle's filter found they fit."""
    result = allocate(
        dra, claims, node.name, node.labels, _TopologyChooser(node, pod), pod_uid=pod.uid
    )
    assert not isinstance(result, AllocationFailure), result.message  # found to fit this cycle
    return result


PLUGIN: Final = PluginSpec[None](
    plugin=DynamicResources, weight=5, pool_weight=5, weight_key="topology_fitness"
)
