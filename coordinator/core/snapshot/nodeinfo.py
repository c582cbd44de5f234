"""The scheduler's view of one node and the pods on it (:class:`NodeInfo`).

Building a snapshot (this is what the inventory does, and what tests do)::

    node = NodeInfo.build(
        "gpu-1",
        labels={"kubernetes.io/hostname": "gpu-1", "topos.io/gpu.product": "H100"},
        allocatable={"cpu": 224_000, "memory": 2 * 2**40, "pods": 110, "nvidia.com/gpu": 8},
        taints=(Taint("dedicated", "gpu", "NoSchedule"),),
        topology=node_topology,          # common.model.NodeTopology, or None without an agent
        pods=(bound_pod_info(b) for b in pods_bound_there),   # inventory BoundPods
    )
    snapshot = Snapshot([node, ...], namespaces={"default": {}})

Units: ``cpu`` in millicores, ``memory``/``ephemeral-storage`` in bytes, everything else
(``pods``, ``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``) in whole units — the same units
:class:`~coordinator.core.podspec.parse.PodRequest` uses.

A :class:`NodeInfo` is immutable; everything derived from its pods (requested resources, which
GPU and MIG instance each pod holds, free CPU and memory per NUMA node) is computed once when it is
built. :meth:`~coordinator.core.snapshot.snapshot.Snapshot.assume` and ``forget`` replace one
node's ``NodeInfo``. Pods are in :mod:`.podinfo`, device bookkeeping in :mod:`.devices`, the
whole cluster in :mod:`.snapshot`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from common.model import NodeTopology
from common.podkeys import GPU_RESOURCE
from coordinator.core.podspec.ports import HostPort
from coordinator.core.podspec.resources import NonZero, nonzero_of
from coordinator.core.podspec.sharing import WHOLE
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.snapshot.devices import (
    DeviceUse,
    NumaFree,
    SharedGpu,
    device_use,
    gpu_numa,
    numa_usage,
    slots,
    slots_used,
)
from coordinator.core.snapshot.podinfo import PodInfo
from coordinator.core.snapshot.podrun import PodRun
from coordinator.core.snapshot.statekey import shape_key, state_key

__all__ = ["NOT_READY_TAINT", "UNSCHEDULABLE_TAINT", "NodeInfo"]

NOT_READY_TAINT: Final = Taint("node.kubernetes.io/not-ready", "", "NoSchedule")
UNSCHEDULABLE_TAINT: Final = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
_UNKNOWN: Final = 2**62  # capacity the hardware did not report
_NONE: Final = NonZero(0, 0)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    stale: bool = False  # the node's agent went silent: no new placements
    topology: NodeTopology | None = None
    #: The pods (:attr:`pods`), shared with the node this one was made from by :meth:`adding`.
    pod_run: PodRun = field(default_factory=PodRun)
    # --- derived (computed by build) ---
    requested: Mapping[str, int] = field(default_factory=dict)
    #: The pods' cpu and memory as kube's resource scoring counts them (kube's
    #: ``NonZeroRequested``: a container without a request counts 100m, 200 MiB).
    nonzero_requested: NonZero = _NONE
    #: The pods' own requests of ``pods`` summed (``requested["pods"]`` is the larger of this
    #: and the pod count: each pod counts one at least).
    pods_asked: int = 0
    effective_taints: tuple[Taint, ...] = ()
    gpu_owner: Mapping[int, str] = field(default_factory=dict)
    mig_owner: Mapping[tuple[int, int], str] = field(default_factory=dict)
    #: GPUs split between fractional pods (never free for a whole-GPU pod)
    shared: Mapping[int, SharedGpu] = field(default_factory=dict)
    #: GPUs a fractional pod could share → (free thousandths, free MiB or None when the GPU's
    #: memory is unknown): the shared ones with room and the free ones
    share_room: Mapping[int, tuple[int, int | None]] = field(default_factory=dict)
    free_gpus: tuple[int, ...] = ()
    free_mig: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    numa_free: tuple[NumaFree, ...] = ()
    unattributed_gpus: int = 0  # GPUs pods hold without saying which (other schedulers)
    #: Everything in-node placement depends on besides the hardware shape (free GPUs, MIG
    #: instances, NUMA capacity): nodes with equal shape and device_state place a pod alike.
    device_state: tuple[object, ...] = ()
    #: An interned token standing for ``device_state`` (equal states, same token): cheap to hash.
    device_token: object = None
    gpu_slots: int = 0  # healthy whole GPUs plus MIG instances (devices a pod could hold)
    gpu_slots_used: int = 0
    used_ports: tuple[HostPort, ...] = ()  # host ports the node's pods bind
    #: UUIDs of GPUs allocated to DRA claims (whoever allocated them): never free for a pod.
    dra_held: frozenset[str] = frozenset()
    #: Models in the node's Hugging Face cache (the agent's ``topos.io/models`` annotation).
    cached_models: frozenset[str] = frozenset()
    #: Results of node-local plugins per pod class, filled by the framework. A NodeInfo never
    #: changes, so what was computed for it stays true; a changed node is a new NodeInfo.
    memo: dict[object, object] = field(default_factory=dict, compare=False, repr=False)
    #: Memo keys (pod classes) refused here by a filter whose refusals adding pods never lifts:
    #: still refused on the nodes :meth:`adding` makes from this one, which carry them over.
    refused: set[object] = field(default_factory=set, compare=False, repr=False)
    #: Tokens of what adding pods never changes, and of the whole scheduling state
    #: (:mod:`.statekey`): nodes with one ``state_key`` share node-local results. ``None`` (a
    #: NodeInfo made by hand): shares nothing. Never ``dataclasses.replace`` a NodeInfo: the copy
    #: would keep keys that no longer describe it (``build`` or ``rebuild`` one).
    shape_key: object = field(default=None, compare=False, repr=False)
    state_key: object = field(default=None, compare=False, repr=False)

    @property
    def pods(self) -> tuple[PodInfo, ...]:
        """The pods on the node, in the inventory's order (assumed ones last)."""
        return self.pod_run.pods()

    @classmethod
    def build(
        cls,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        allocatable: Mapping[str, int] | None = None,
        taints: Sequence[Taint] = (),
        unschedulable: bool = False,
        ready: bool = True,
        stale: bool = False,
        topology: NodeTopology | None = None,
        pods: Iterable[PodInfo] = (),
        requested: Mapping[str, int] | None = None,
        dra_held: frozenset[str] = frozenset(),
        cached_models: frozenset[str] = frozenset(),
    ) -> NodeInfo:
        """A node with everything derived from its pods. ``requested`` overrides the sum of the
        pods' requests (when the inventory tracks it separately)."""
        pods_t = tuple(pods)
        labels = dict(labels or {})
        labels.setdefault("kubernetes.io/hostname", name)
        req: dict[str, int] = {}
        if requested is None:
            for p in pods_t:
                for k, v in p.requests.items():
                    req[k] = req.get(k, 0) + v
        else:
            req.update(requested)
        nonzero = _nonzero_sum(_NONE, pods_t)
        asked = req.get("pods", 0)
        req["pods"] = max(asked, len(pods_t))
        eff = list(taints)
        if not ready and not any(t.key == NOT_READY_TAINT.key for t in eff):
            eff.append(NOT_READY_TAINT)
        use = device_use(topology, pods_t)
        gpu_owner, mig_owner, shared = use.gpu_owner, use.mig_owner, use.shared
        numa_use, busy = use.numa_use, use.busy
        # A fractional pod's nvidia.com/gpu is a replica of its shared GPU, not a GPU of its own.
        held = sum(p.requests.get(GPU_RESOURCE, 0) for p in pods_t if p.share is None)
        attributed = len(gpu_owner) + len(mig_owner)
        if dra_held and topology is not None:
            claimed = {g.index for g in topology.gpus if g.uuid in dra_held} - set(gpu_owner)
            attributed += len(claimed)  # a KEP-5004 pod's nvidia.com/gpu is its claim's GPUs
        else:
            claimed = set()
        free_gpus: tuple[int, ...] = ()
        free_mig: dict[str, tuple[tuple[int, int], ...]] = {}
        numa_free: tuple[NumaFree, ...] = ()
        room: dict[int, tuple[int, int | None]] = {}
        if topology is not None:
            for g in topology.gpus:
                if not g.healthy or g.mig_enabled or g.index in gpu_owner or g.index in claimed:
                    continue
                s = shared.get(g.index)
                mib = g.memory_total_mib
                if s is None:
                    room[g.index] = (WHOLE, mib)
                elif s.milli < WHOLE and (mib is None or s.memory_mib < mib):
                    room[g.index] = (WHOLE - s.milli, None if mib is None else mib - s.memory_mib)
            free_gpus = tuple(i for i in room if i not in shared)
            mig: dict[str, list[tuple[int, int]]] = {}
            for g in topology.gpus:
                if not (g.healthy and g.mig_enabled):
                    continue
                for inst in g.mig_instances:
                    if (g.index, inst.gi_id) not in mig_owner:
                        mig.setdefault(inst.profile, []).append((g.index, inst.gi_id))
            free_mig = {k: tuple(v) for k, v in mig.items()}
            numa_free = tuple(
                NumaFree(
                    numa=n.id,
                    # Unknown capacity (no CPU list, no memory size) constrains nothing.
                    cpu_milli=(len(n.cpus) * 1000 if n.cpus else _UNKNOWN)
                    - numa_use.get(n.id, (0, 0))[0],
                    memory=(n.memory_mib * 2**20 if n.memory_mib is not None else _UNKNOWN)
                    - numa_use.get(n.id, (0, 0))[1],
                    gpus=tuple(i for i in free_gpus if gpu_numa(topology, i) == n.id),
                    busy=n.id in busy,
                )
                for n in topology.numa_nodes
            )
        state: tuple[object, ...] = (
            free_gpus,
            tuple(sorted(room.items())) if shared else (),
            max(0, held - attributed),
            tuple(sorted(free_mig.items())),
            tuple(sorted(mig_owner)),
            numa_free,
        )
        alloc = dict(allocatable or {})
        taints_t = tuple(taints)
        eff_t = tuple(eff)
        shape = shape_key(
            labels,
            alloc,
            taints_t,
            eff_t,
            (unschedulable, ready, stale),
            topology,
            dra_held,
            cached_models,
        )
        slots_in_use = slots_used(
            topology, requested=req, use=use, held=held, attributed=attributed
        )
        ports = tuple(hp for p in pods_t for hp in p.host_ports)
        token = _intern_state(state)
        return cls(
            name=name,
            labels=labels,
            allocatable=alloc,
            taints=taints_t,
            unschedulable=unschedulable,
            ready=ready,
            stale=stale,
            topology=topology,
            pod_run=PodRun(pods_t),
            requested=req,
            nonzero_requested=nonzero,
            pods_asked=asked,
            effective_taints=eff_t,
            gpu_owner=gpu_owner,
            mig_owner=mig_owner,
            shared=shared,
            share_room=room,
            free_gpus=free_gpus,
            free_mig=free_mig,
            numa_free=numa_free,
            unattributed_gpus=max(0, held - attributed),
            gpu_slots=slots(topology, alloc),
            gpu_slots_used=slots_in_use,
            used_ports=ports,
            dra_held=dra_held,
            cached_models=cached_models,
            device_state=state,
            device_token=token,
            shape_key=shape,
            state_key=state_key(shape, req, nonzero, token, slots_in_use, shared, ports),
        )

    def rebuild(
        self, pods: Iterable[PodInfo], *, dra_held: frozenset[str] | None = None
    ) -> NodeInfo:
        return NodeInfo.build(
            self.name,
            labels=self.labels,
            allocatable=self.allocatable,
            taints=self.taints,
            unschedulable=self.unschedulable,
            ready=self.ready,
            stale=self.stale,
            topology=self.topology,
            pods=pods,
            dra_held=self.dra_held if dra_held is None else dra_held,
            cached_models=self.cached_models,
        )

    def adding(self, pods: Sequence[PodInfo]) -> NodeInfo:
        """This node with ``pods`` added after its own: equal to ``rebuild((*self.pods,
        *pods))``, but worked out from what this node derived when the node has no device
        topology (nothing held but counts) or the new pods hold whole GPUs or none (no share,
        MIG instance or NUMA node of their own; the common assume and bind seen) — the other
        cases are rebuilt. The pod classes refused for good here
        (:attr:`refused`) are refused there too."""
        if not pods:
            return self
        out = self._added(pods)
        if self.refused:
            out.refused.update(self.refused)
        return out

    def _added(self, pods: Sequence[PodInfo]) -> NodeInfo:
        topology = self.topology
        if topology is None:
            taken: list[tuple[int, str]] | None = []  # no devices to hold (KWOK, CPU nodes)
        else:
            taken = _whole_gpus(topology, pods) if not self.dra_held else None
        if taken is None or any(i in self.gpu_owner for i, _ in taken):
            return self.rebuild((*self.pods, *pods))
        gone = {i for i, _ in taken}
        if len(gone) < len(taken) or not gone.isdisjoint(self.shared):
            return self.rebuild((*self.pods, *pods))
        run = self.pod_run.extended(pods)
        req = dict(self.requested)
        req["pods"] = self.pods_asked
        for p in pods:
            for k, v in p.requests.items():
                req[k] = req.get(k, 0) + v
        nonzero = _nonzero_sum(self.nonzero_requested, pods)
        asked = req["pods"]
        req["pods"] = max(asked, len(run))
        gpu_owner = dict(self.gpu_owner)
        gpu_owner.update(taken)
        room = {i: r for i, r in self.share_room.items() if i not in gone}
        free_gpus = tuple(i for i in self.free_gpus if i not in gone)
        busy = {gpu_numa(topology, i) for i in gone} if topology is not None else set()
        pinned: dict[int, tuple[int, int]] = {}  # NUMA id → (cpu milli, memory) added there
        for p in pods:
            for u in numa_usage(p):
                c, m = pinned.get(u.numa, (0, 0))
                pinned[u.numa] = (c + u.cpu_milli, m + u.memory)
                busy.add(u.numa)
            busy.update(p.numa)
        numa_free = tuple(
            NumaFree(
                numa=n.numa,
                cpu_milli=n.cpu_milli - pinned.get(n.numa, (0, 0))[0],
                memory=n.memory - pinned.get(n.numa, (0, 0))[1],
                gpus=tuple(i for i in n.gpus if i not in gone),
                busy=n.busy or n.numa in busy,
            )
            for n in self.numa_free
        )
        held = (
            sum(p.requests.get(GPU_RESOURCE, 0) for p in run if p.share is None)
            if req.get(GPU_RESOURCE, 0)
            else 0  # no pod here asks for a GPU: no walk over them all
        )
        attributed = len(gpu_owner) + len(self.mig_owner)
        use = DeviceUse(gpu_owner, dict(self.mig_owner), dict(self.shared), {}, set())
        state: tuple[object, ...] = (
            free_gpus,
            tuple(sorted(room.items())) if self.shared else (),
            max(0, held - attributed),
            *self.device_state[3:5],
            numa_free,
        )
        slots_in_use = slots_used(
            topology, requested=req, use=use, held=held, attributed=attributed
        )
        ports = (*self.used_ports, *(hp for p in pods for hp in p.host_ports))
        token = _intern_state(state)
        return NodeInfo(
            name=self.name,
            labels=self.labels,
            allocatable=self.allocatable,
            taints=self.taints,
            unschedulable=self.unschedulable,
            ready=self.ready,
            stale=self.stale,
            topology=topology,
            pod_run=run,
            requested=req,
            nonzero_requested=nonzero,
            pods_asked=asked,
            effective_taints=self.effective_taints,
            gpu_owner=gpu_owner,
            mig_owner=self.mig_owner,
            shared=self.shared,
            share_room=room,
            free_gpus=free_gpus,
            free_mig=self.free_mig,
            numa_free=numa_free,
            unattributed_gpus=max(0, held - attributed),
            gpu_slots=self.gpu_slots,
            gpu_slots_used=slots_in_use,
            used_ports=ports,
            dra_held=self.dra_held,
            cached_models=self.cached_models,
            device_state=state,
            device_token=token,
            shape_key=self.shape_key,
            state_key=None
            if self.shape_key is None
            else state_key(self.shape_key, req, nonzero, token, slots_in_use, self.shared, ports),
        )

    def with_pods(
        self,
        pods: tuple[PodInfo, ...] | PodRun,
        *,
        left: Sequence[PodInfo],
        came: Sequence[PodInfo],
    ) -> NodeInfo:
        """This node holding ``pods`` instead: its own less ``left``, with ``came`` (pods new
        here, or new versions of pods it holds), in the order the caller keeps them. Equal to
        ``rebuild(pods)``; worked out from what this node derived, with no walk over the pods
        that stayed, when the node has no device topology and no DRA-held GPUs (a KWOK or CPU
        node: its pods hold nothing but counts) — the other cases are rebuilt."""
        if self.topology is not None or self.dra_held or self.shape_key is None:
            return self.rebuild(pods)
        req = dict(self.requested)
        req["pods"] = self.pods_asked
        held = self.unattributed_gpus  # no topology: every GPU held is held without an index
        for p in left:
            for k, v in p.requests.items():
                req[k] = req.get(k, 0) - v
            if p.share is None:
                held -= p.requests.get(GPU_RESOURCE, 0)
        for p in came:
            for k, v in p.requests.items():
                req[k] = req.get(k, 0) + v
            if p.share is None:
                held += p.requests.get(GPU_RESOURCE, 0)
        asked = req["pods"]
        req = {k: v for k, v in req.items() if v > 0}
        req["pods"] = max(asked, len(pods))
        gone = _nonzero_sum(_NONE, left)
        cpu, memory = _nonzero_sum(self.nonzero_requested, came)
        nonzero = NonZero(cpu - gone[0], memory - gone[1])
        if any(p.host_ports for p in left) or any(p.host_ports for p in came):
            ports = tuple(hp for p in pods for hp in p.host_ports)
        else:
            ports = self.used_ports
        state: tuple[object, ...] = ((), (), max(0, held), (), (), ())
        token = _intern_state(state)
        slots_in_use = req.get(GPU_RESOURCE, 0)  # slots_used without a topology
        return NodeInfo(
            name=self.name,
            labels=self.labels,
            allocatable=self.allocatable,
            taints=self.taints,
            unschedulable=self.unschedulable,
            ready=self.ready,
            stale=self.stale,
            topology=None,
            pod_run=pods if isinstance(pods, PodRun) else PodRun(pods),
            requested=req,
            nonzero_requested=nonzero,
            pods_asked=asked,
            effective_taints=self.effective_taints,
            unattributed_gpus=max(0, held),
            gpu_slots=self.gpu_slots,
            gpu_slots_used=slots_in_use,
            used_ports=ports,
            cached_models=self.cached_models,
            device_state=state,
            device_token=token,
            shape_key=self.shape_key,
            state_key=state_key(
                self.shape_key, req, nonzero, token, slots_in_use, self.shared, ports
            ),
        )

    def free(self, resource: str) -> int:
        return self.allocatable.get(resource, 0) - self.requested.get(resource, 0)

    @property
    def free_whole_gpus(self) -> int:
        """Whole GPUs a new pod could get here (known free, minus those held anonymously)."""
        if self.topology is None:
            return max(0, self.free(GPU_RESOURCE))
        return max(0, len(self.free_gpus) - self.unattributed_gpus)


def _nonzero_sum(base: NonZero, pods: Iterable[PodInfo]) -> NonZero:
    cpu, memory = base
    for p in pods:
        nz = p.nonzero
        if nz is None:
            nz = nonzero_of(p.requests)
        cpu += nz[0]
        memory += nz[1]
    return NonZero(cpu, memory)


def _whole_gpus(
    topology: NodeTopology | None, pods: Sequence[PodInfo]
) -> list[tuple[int, str]] | None:
    """(GPU index, pod key) for each whole GPU ``pods`` hold; ``None`` when one holds anything
    else (a share, a MIG instance, a NUMA node of its own) or names a GPU not on the node."""
    if topology is None:
        return None
    out: list[tuple[int, str]] = []
    by_uuid: dict[str, int] | None = None
    count = len(topology.gpus)
    for p in pods:
        if p.share is not None or p.exclusive_numa:
            return None
        placement = p.placement
        if placement is not None:
            if placement.mig or placement.share is not None:
                return None
            out.extend((i, p.key) for i in placement.gpus)
        if p.device_ids:
            if by_uuid is None:
                if any(g.mig_instances for g in topology.gpus):
                    return None  # an id might name a MIG instance
                by_uuid = {g.uuid: g.index for g in topology.gpus}
            for dev in p.device_ids:
                i = by_uuid.get(dev)
                if i is not None:  # an unknown id holds nothing here (as in device_use)
                    out.append((i, p.key))
    if any(not 0 <= i < count for i, _ in out):
        return None
    return out


_STATES: dict[tuple[object, ...], object] = {}


def _intern_state(state: tuple[object, ...]) -> object:
    token = _STATES.get(state)
    if token is None:
        if len(_STATES) > 200_000:
            _STATES.clear()
        token = _STATES[state] = object()
    return token
