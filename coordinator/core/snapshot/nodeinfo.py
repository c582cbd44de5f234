"""The scheduler's view of nodes and the pods on them, and the :class:`Snapshot` one cycle uses.

Building a snapshot (this is what the inventory does, and what tests do)::

    node = NodeInfo.build(
        "gpu-1",
        labels={"kubernetes.io/hostname": "gpu-1", "topos.io/gpu.product": "H100"},
        allocatable={"cpu": 224_000, "memory": 2 * 2**40, "pods": 110, "nvidia.com/gpu": 8},
        taints=(Taint("dedicated", "gpu", "NoSchedule"),),
        topology=node_topology,          # common.model.NodeTopology, or None without an agent
        pods=(PodInfo.from_pod_object(p) for p in pods_bound_there),
    )
    snapshot = Snapshot([node, ...], namespaces={"default": {}})

Units: ``cpu`` in millicores, ``memory``/``ephemeral-storage`` in bytes, everything else
(``pods``, ``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``) in whole units — the same units
:class:`~coordinator.core.podspec.parse.PodRequest` uses.

A :class:`NodeInfo` is immutable; everything derived from its pods (requested resources, which
GPU and MIG instance each pod holds, free CPU and memory per NUMA node) is computed once when it is
built. :meth:`Snapshot.assume` and :meth:`Snapshot.forget` replace one node's ``NodeInfo`` and keep
the snapshot's indexes current.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from common import podkeys
from common.model import NodeTopology
from common.podkeys import GPU_RESOURCE
from coordinator.core.podspec.affinity import (
    AffinityTerm,
    WeightedAffinityTerm,
    parse_affinity_terms,
)
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.ports import HostPort, host_ports
from coordinator.core.podspec.resources import held_requests
from coordinator.core.podspec.selectors import LabelSelector
from coordinator.core.podspec.tolerations import Taint

__all__ = [
    "NOT_READY_TAINT",
    "UNSCHEDULABLE_TAINT",
    "NodeInfo",
    "NumaUse",
    "Placement",
    "PodInfo",
    "Snapshot",
    "gpu_numa",
    "mig_device_id",
]

NOT_READY_TAINT: Final = Taint("node.kubernetes.io/not-ready", "", "NoSchedule")
UNSCHEDULABLE_TAINT: Final = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
_TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
_UNKNOWN: Final = 2**62  # capacity the hardware did not report


@dataclass(frozen=True, slots=True)
class NumaUse:
    """CPU (millicores) and memory (bytes) a pod holds on one NUMA node."""

    numa: int
    cpu_milli: int = 0
    memory: int = 0


@dataclass(frozen=True, slots=True)
class Placement:
    """What a pod holds inside its node: GPUs, MIG instances, NUMA nodes."""

    gpus: tuple[int, ...] = ()  # whole GPU indices
    mig: tuple[tuple[int, int], ...] = ()  # (GPU index, GPU-instance id)
    numa: tuple[int, ...] = ()  # NUMA node ids
    numa_usage: tuple[NumaUse, ...] = ()  # per-NUMA CPU/memory when the pod is NUMA-pinned
    exclusive_numa: bool = False  # NUMA nodes held exclusively (policy isolated)


def gpu_numa(topology: NodeTopology, index: int) -> int | None:
    """The NUMA node of a GPU; on a node with a single NUMA node, that one even when the GPU
    did not say (VMs and some boards report no affinity)."""
    numa = topology.gpus[index].numa_node
    if numa is None and len(topology.numa_nodes) == 1:
        return topology.numa_nodes[0].id
    return numa


def mig_device_id(topology: NodeTopology, gpu: int, gi_id: int) -> str:
    """The id written in ``topos.io/assigned-gpus`` for a MIG instance: its ``MIG-…`` UUID when
    known, else ``<GPU UUID>/gi<id>``."""
    g = topology.gpus[gpu]
    for inst in g.mig_instances:
        if inst.gi_id == gi_id and inst.uuid:
            return inst.uuid
    return f"{g.uuid}/gi{gi_id}"


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod already on a node (bound by any scheduler) or assumed onto it this cycle."""

    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    requests: Mapping[str, int] = field(default_factory=dict)
    priority: int = 0
    uid: str = ""
    # device ids from topos.io/assigned-gpus (GPU UUIDs, MIG UUIDs or "<GPU UUID>/gi<n>"),
    # or from the agent's PodResources report
    device_ids: tuple[str, ...] = ()
    placement: Placement | None = None  # set when known by index (assumed pods)
    numa: tuple[int, ...] = ()  # from topos.io/assigned-numa
    exclusive_numa: bool = False
    affinity: tuple[AffinityTerm, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    affinity_preferred: tuple[WeightedAffinityTerm, ...] = ()
    anti_affinity_preferred: tuple[WeightedAffinityTerm, ...] = ()
    host_ports: tuple[HostPort, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def has_affinity(self) -> bool:
        return bool(
            self.affinity
            or self.anti_affinity
            or self.affinity_preferred
            or self.anti_affinity_preferred
        )

    @classmethod
    def from_request(cls, pod: PodRequest, placement: Placement) -> PodInfo:
        return cls(
            namespace=pod.namespace,
            name=pod.name,
            labels=pod.labels,
            requests=pod.requests,
            priority=pod.priority,
            uid=pod.uid,
            placement=placement,
            numa=placement.numa,
            exclusive_numa=placement.exclusive_numa,
            affinity=pod.pod_affinity,
            anti_affinity=pod.pod_anti_affinity,
            affinity_preferred=pod.pod_affinity_preferred,
            anti_affinity_preferred=pod.pod_anti_affinity_preferred,
            host_ports=pod.host_ports,
        )

    @classmethod
    def from_pod_object(cls, obj: Mapping[str, object]) -> PodInfo | None:
        """A bound pod as the API server returns it; ``None`` for pods that hold nothing (ended).

        Lenient by design: a running pod's odd annotation must not hide the capacity it uses.
        """
        meta = obj.get("metadata")
        spec = obj.get("spec")
        status = obj.get("status")
        if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
            return None
        if isinstance(status, Mapping) and status.get("phase") in _TERMINAL_PHASES:
            return None
        namespace = str(meta.get("namespace") or "default")
        labels_raw = meta.get("labels")
        labels = (
            {str(k): str(v) for k, v in labels_raw.items()}
            if isinstance(labels_raw, Mapping)
            else {}
        )
        ann_raw = meta.get("annotations")
        annotations = (
            {str(k): str(v) for k, v in ann_raw.items()} if isinstance(ann_raw, Mapping) else {}
        )
        devices = tuple(
            d.strip() for d in annotations.get(podkeys.ASSIGNED_GPUS, "").split(",") if d.strip()
        )
        numa: list[int] = []
        for part in annotations.get(podkeys.ASSIGNED_NUMA, "").split(","):
            if part.strip().isdigit():
                numa.append(int(part))
        policy, _ = podkeys.lookup(podkeys.NUMA_POLICY, annotations)
        terms: dict[str, tuple[tuple[AffinityTerm, ...], tuple[WeightedAffinityTerm, ...]]] = {}
        affinity = spec.get("affinity")
        for kind in ("podAffinity", "podAntiAffinity"):
            block = affinity.get(kind) if isinstance(affinity, Mapping) else None
            try:
                terms[kind] = (
                    parse_affinity_terms(block, kind, namespace, labels)
                    if isinstance(block, Mapping)
                    else ((), ())
                )
            except Exception:  # a malformed term on a running pod constrains nothing
                terms[kind] = ((), ())
        priority = spec.get("priority")
        return cls(
            namespace=namespace,
            name=str(meta.get("name") or ""),
            labels=labels,
            requests=held_requests(spec),
            priority=priority if isinstance(priority, int) else 0,
            uid=str(meta.get("uid") or ""),
            device_ids=devices,
            numa=tuple(numa),
            exclusive_numa=policy == "isolated",
            affinity=terms["podAffinity"][0],
            affinity_preferred=terms["podAffinity"][1],
            anti_affinity=terms["podAntiAffinity"][0],
            anti_affinity_preferred=terms["podAntiAffinity"][1],
            host_ports=_lenient_ports(spec),
        )


def _lenient_ports(spec: Mapping[str, object]) -> tuple[HostPort, ...]:
    try:
        return host_ports(spec)
    except Exception:  # a running pod's odd port entry does not stop scheduling elsewhere
        return ()


@dataclass(frozen=True, slots=True)
class NumaFree:
    """Free capacity of one NUMA node."""

    numa: int
    cpu_milli: int
    memory: int
    gpus: tuple[int, ...]  # free whole GPUs attached to it
    busy: bool  # some pod holds CPU, memory or a device here


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
    pods: tuple[PodInfo, ...] = ()
    # --- derived (computed by build) ---
    requested: Mapping[str, int] = field(default_factory=dict)
    effective_taints: tuple[Taint, ...] = ()
    gpu_owner: Mapping[int, str] = field(default_factory=dict)
    mig_owner: Mapping[tuple[int, int], str] = field(default_factory=dict)
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
    #: Results of node-local plugins per pod class, filled by the framework. A NodeInfo never
    #: changes, so what was computed for it stays true; a changed node is a new NodeInfo.
    memo: dict[object, object] = field(default_factory=dict, compare=False, repr=False)

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
        req["pods"] = max(req.get("pods", 0), len(pods_t))
        eff = list(taints)
        if not ready and not any(t.key == NOT_READY_TAINT.key for t in eff):
            eff.append(NOT_READY_TAINT)
        gpu_owner, mig_owner, numa_use, busy = _device_use(topology, pods_t)
        held = sum(p.requests.get(GPU_RESOURCE, 0) for p in pods_t)
        attributed = len(gpu_owner) + len(mig_owner)
        free_gpus: tuple[int, ...] = ()
        free_mig: dict[str, tuple[tuple[int, int], ...]] = {}
        numa_free: tuple[NumaFree, ...] = ()
        if topology is not None:
            free_gpus = tuple(
                g.index
                for g in topology.gpus
                if g.healthy and not g.mig_enabled and g.index not in gpu_owner
            )
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
            max(0, held - attributed),
            tuple(sorted(free_mig.items())),
            tuple(sorted(mig_owner)),
            numa_free,
        )
        return cls(
            name=name,
            labels=labels,
            allocatable=dict(allocatable or {}),
            taints=tuple(taints),
            unschedulable=unschedulable,
            ready=ready,
            stale=stale,
            topology=topology,
            pods=pods_t,
            requested=req,
            effective_taints=tuple(eff),
            gpu_owner=gpu_owner,
            mig_owner=mig_owner,
            free_gpus=free_gpus,
            free_mig=free_mig,
            numa_free=numa_free,
            unattributed_gpus=max(0, held - attributed),
            gpu_slots=_slots(topology, allocatable or {}),
            gpu_slots_used=_slots_used(
                topology,
                requested=req,
                gpu_owner=gpu_owner,
                mig_owner=mig_owner,
                held=held,
                attributed=attributed,
            ),
            used_ports=tuple(hp for p in pods_t for hp in p.host_ports),
            device_state=state,
            device_token=_intern_state(state),
        )

    def rebuild(self, pods: Iterable[PodInfo]) -> NodeInfo:
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
        )

    def free(self, resource: str) -> int:
        return self.allocatable.get(resource, 0) - self.requested.get(resource, 0)

    @property
    def free_whole_gpus(self) -> int:
        """Whole GPUs a new pod could get here (known free, minus those held anonymously)."""
        if self.topology is None:
            return max(0, self.free(GPU_RESOURCE))
        return max(0, len(self.free_gpus) - self.unattributed_gpus)


_STATES: dict[tuple[object, ...], object] = {}


def _intern_state(state: tuple[object, ...]) -> object:
    token = _STATES.get(state)
    if token is None:
        if len(_STATES) > 200_000:
            _STATES.clear()
        token = _STATES[state] = object()
    return token


def _slots(topology: NodeTopology | None, allocatable: Mapping[str, int]) -> int:
    if topology is None:
        return allocatable.get(GPU_RESOURCE, 0)
    return sum((len(g.mig_instances) if g.mig_enabled else 1) for g in topology.gpus if g.healthy)


def _slots_used(
    topology: NodeTopology | None,
    *,
    requested: Mapping[str, int],
    gpu_owner: Mapping[int, str],
    mig_owner: Mapping[tuple[int, int], str],
    held: int,
    attributed: int,
) -> int:
    if topology is None:
        return requested.get(GPU_RESOURCE, 0)
    return len(gpu_owner) + len(mig_owner) + max(0, held - attributed)


def _device_use(
    topology: NodeTopology | None, pods: Sequence[PodInfo]
) -> tuple[dict[int, str], dict[tuple[int, int], str], dict[int, tuple[int, int]], set[int]]:
    gpu_owner: dict[int, str] = {}
    mig_owner: dict[tuple[int, int], str] = {}
    numa_use: dict[int, tuple[int, int]] = {}
    busy: set[int] = set()
    if topology is None:
        return gpu_owner, mig_owner, numa_use, busy
    by_uuid: dict[str, int] = {g.uuid: g.index for g in topology.gpus}
    by_mig: dict[str, tuple[int, int]] = {}
    for g in topology.gpus:
        for inst in g.mig_instances:
            by_mig[mig_device_id(topology, g.index, inst.gi_id)] = (g.index, inst.gi_id)
            if inst.uuid:
                by_mig[inst.uuid] = (g.index, inst.gi_id)
    for p in pods:
        gpus: list[int] = []
        migs: list[tuple[int, int]] = []
        if p.placement is not None:
            gpus.extend(p.placement.gpus)
            migs.extend(p.placement.mig)
        for dev in p.device_ids:
            if dev in by_uuid:
                gpus.append(by_uuid[dev])
            elif dev in by_mig:
                migs.append(by_mig[dev])
        for i in gpus:
            gpu_owner[i] = p.key
            numa = gpu_numa(topology, i)
            if numa is not None:
                busy.add(numa)
        for m in migs:
            mig_owner[m] = p.key
            numa = gpu_numa(topology, m[0])
            if numa is not None:
                busy.add(numa)
        usage: Sequence[NumaUse] = p.placement.numa_usage if p.placement else ()
        if not usage and p.numa:
            # Only ids are known (rebuilt from annotations): split requests evenly.
            k = len(p.numa)
            cpu, mem = p.requests.get("cpu", 0), p.requests.get("memory", 0)
            usage = [NumaUse(n, -(-cpu // k), -(-mem // k)) for n in p.numa]
        for u in usage:
            c, m_ = numa_use.get(u.numa, (0, 0))
            numa_use[u.numa] = (c + u.cpu_milli, m_ + u.memory)
            busy.add(u.numa)
        if p.exclusive_numa:
            for n in p.numa:
                # An isolated pod's NUMA node is closed to everyone else.
                numa_use[n] = (10**15, 10**18)
                busy.add(n)
        elif p.numa:
            busy.update(p.numa)
    return gpu_owner, mig_owner, numa_use, busy


class Snapshot:
    """All nodes (in a stable order) and namespace labels, as of the start of a cycle.

    ``assume`` places a pod on a node of this snapshot before its bind is confirmed (so the next
    cycle sees the capacity taken); ``forget`` undoes it. Both replace the node's ``NodeInfo``;
    :meth:`copy` is cheap (shallow), for what-if runs.

    Indexes for the inter-pod plugins (pods by label, pods with affinity terms, nodes with
    ``PreferNoSchedule`` taints) are built on first use and kept current by ``assume``/``forget``.
    """

    __slots__ = ("_assumed", "_index", "_nodes", "_order", "namespaces")

    def __init__(
        self,
        nodes: Iterable[NodeInfo],
        *,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self._nodes: dict[str, NodeInfo] = {}
        for n in nodes:
            if n.name in self._nodes:
                raise ValueError(f"node {n.name!r} appears twice in the snapshot")
            self._nodes[n.name] = n
        self.namespaces: Mapping[str, Mapping[str, str]] = dict(namespaces or {})
        self._assumed: dict[str, str] = {}  # pod key → node name
        self._order: tuple[NodeInfo, ...] | None = None
        self._index: _PodIndex | None = None

    def copy(self) -> Snapshot:
        other = Snapshot((), namespaces=self.namespaces)
        other._nodes = dict(self._nodes)
        other._assumed = dict(self._assumed)
        other._order = self._order
        other._index = self._index.copy() if self._index is not None else None
        return other

    @property
    def nodes(self) -> Sequence[NodeInfo]:
        if self._order is None:
            self._order = tuple(self._nodes.values())
        return self._order

    def __len__(self) -> int:
        return len(self._nodes)

    def get(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def node_names(self) -> Sequence[str]:
        return tuple(self._nodes)

    def replace(self, node: NodeInfo) -> None:
        """Put a new or rebuilt node in (the inventory's incremental update path). The indexes
        are updated for that node only."""
        old = self._nodes.get(node.name)
        self._nodes[node.name] = node
        self._order = None
        if self._index is not None:
            self._index.swap_node(old, node)

    def remove(self, name: str) -> None:
        old = self._nodes.pop(name, None)
        if old is not None:
            self._order = None
            if self._index is not None:
                self._index.swap_node(old, None)

    def is_assumed(self, pod_key: str) -> bool:
        return pod_key in self._assumed

    def assume(self, pod: PodRequest, node_name: str, placement: Placement) -> None:
        node = self._nodes.get(node_name)
        if node is None:
            raise KeyError(f"node {node_name!r} is not in the snapshot")
        if pod.key in self._assumed:
            raise ValueError(f"pod {pod.key} is already assumed on {self._assumed[pod.key]}")
        info = PodInfo.from_request(pod, placement)
        self._set(node.rebuild((*node.pods, info)))
        self._assumed[pod.key] = node_name
        if self._index is not None:
            self._index.add(node_name, info)

    def forget(self, pod_key: str) -> bool:
        """Undo :meth:`assume`; False when the pod was not assumed here."""
        node_name = self._assumed.pop(pod_key, None)
        if node_name is None:
            return False
        node = self._nodes.get(node_name)
        if node is not None:
            gone = [p for p in node.pods if p.key == pod_key]
            self._set(node.rebuild(p for p in node.pods if p.key != pod_key))
            if self._index is not None:
                for p in gone:
                    self._index.discard(p)
        return True

    def _set(self, node: NodeInfo) -> None:
        self._nodes[node.name] = node
        self._order = None
        if self._index is not None and any(p.has_affinity for p in node.pods):
            self._index.with_affinity_list = None  # it holds the node's previous NodeInfo

    # --- indexes ----------------------------------------------------------------------------
    def _pod_index(self) -> _PodIndex:
        if self._index is None:
            index = _PodIndex()
            for node in self._nodes.values():
                for p in node.pods:
                    index.add(node.name, p)
                if any(t.effect == "PreferNoSchedule" for t in node.effective_taints):
                    index.prefer_no_schedule.add(node.name)
            self._index = index
        return self._index

    def pods_with_affinity(self) -> list[tuple[NodeInfo, PodInfo]]:
        """Pods carrying (anti-)affinity terms, with their nodes (cached until a change)."""
        index = self._pod_index()
        if index.with_affinity_list is None:
            index.with_affinity_list = [
                (self._nodes[n], p) for n, p in index.with_affinity.values() if n in self._nodes
            ]
        return index.with_affinity_list

    def pods_with_label(self, key: str, value: str) -> list[tuple[NodeInfo, PodInfo]]:
        return [
            (self._nodes[n], p)
            for n, p in self._pod_index().by_label.get((key, value), {}).values()
            if n in self._nodes
        ]

    def all_pods(self) -> list[tuple[NodeInfo, PodInfo]]:
        return [(node, p) for node in self.nodes for p in node.pods]

    def pods_selected_by(self, selector: LabelSelector | None) -> list[tuple[NodeInfo, PodInfo]]:
        """A superset of the pods ``selector`` matches (narrowed through the label index when
        the selector names a label value); callers still match each pod."""
        if selector is None:
            return []
        for key, value in selector.match_labels:
            return self.pods_with_label(key, value)
        for req in selector.match_expressions:
            if req.operator == "In":
                out: list[tuple[NodeInfo, PodInfo]] = []
                for value in req.values:
                    out.extend(self.pods_with_label(req.key, value))
                return out
        return self.all_pods()

    def domains(self, key: str) -> Mapping[str, str]:
        """Node name → value of label ``key``, for the nodes carrying it (cached per key)."""
        index = self._pod_index()
        cached = index.domains.get(key)
        if cached is None:
            cached = index.domains[key] = {
                n.name: n.labels[key] for n in self._nodes.values() if key in n.labels
            }
        return cached

    def has_prefer_no_schedule_taints(self) -> bool:
        return bool(self._pod_index().prefer_no_schedule)


class _PodIndex:
    __slots__ = ("by_label", "domains", "prefer_no_schedule", "with_affinity", "with_affinity_list")

    def __init__(self) -> None:
        self.with_affinity_list: list[tuple[NodeInfo, PodInfo]] | None = None
        self.domains: dict[str, dict[str, str]] = {}  # label key → node → value
        self.by_label: dict[tuple[str, str], dict[str, tuple[str, PodInfo]]] = {}
        self.with_affinity: dict[str, tuple[str, PodInfo]] = {}
        self.prefer_no_schedule: set[str] = set()

    def copy(self) -> _PodIndex:
        other = _PodIndex()
        other.by_label = {k: dict(v) for k, v in self.by_label.items()}
        other.with_affinity = dict(self.with_affinity)
        other.prefer_no_schedule = set(self.prefer_no_schedule)
        other.domains = self.domains  # node labels do not change with assume/forget
        return other

    def swap_node(self, old: NodeInfo | None, new: NodeInfo | None) -> None:
        self.with_affinity_list = None  # holds NodeInfo objects: rebuild after any swap
        if old is not None:
            for p in old.pods:
                self.discard(p)
            self.prefer_no_schedule.discard(old.name)
        if new is not None:
            for p in new.pods:
                self.add(new.name, p)
            if any(t.effect == "PreferNoSchedule" for t in new.effective_taints):
                self.prefer_no_schedule.add(new.name)
        if old is None or new is None or old.labels != new.labels:
            self.domains = {}  # a fresh dict: copies of the snapshot may share the old one

    def add(self, node: str, pod: PodInfo) -> None:
        for pair in pod.labels.items():
            self.by_label.setdefault(pair, {})[pod.key] = (node, pod)
        if pod.has_affinity:
            self.with_affinity[pod.key] = (node, pod)
            self.with_affinity_list = None

    def discard(self, pod: PodInfo) -> None:
        if self.with_affinity.pop(pod.key, None) is not None:
            self.with_affinity_list = None
        for pair in pod.labels.items():
            bucket = self.by_label.get(pair)
            if bucket is not None:
                bucket.pop(pod.key, None)
