"""What the inventory knows about one node, from its three sources.

- :class:`AgentReport` — the node's agent over the capacity stream (topology, allocations).
- :class:`KubeNode` — the Node object in the API server (allocatable, readiness, labels, taints).
- :class:`BoundPod` — every non-terminal pod bound to the node, by *any* scheduler.

Quantities are integers in canonical units: ``cpu`` in millicores, ``memory`` and
``ephemeral-storage`` in bytes, everything else (``nvidia.com/gpu``, ``pods``, MIG resources) in
units. :class:`NodeState` is the merged, read-only view handed to the API and the scheduler.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from common import podkeys
from common.model import NodeTopology
from common.wire import ContainerAllocation
from coordinator.core.podspec.intree import InlineVolume
from coordinator.core.podspec.ports import HostPort
from coordinator.core.podspec.resources import NonZero
from coordinator.inventory.mismatch import GpuMismatch

GPU_RESOURCE: Final = podkeys.GPU_RESOURCE
ASSIGNED_GPUS_ANNOTATION: Final = podkeys.ASSIGNED_GPUS


class AgentReport(msgspec.Struct, frozen=True, kw_only=True):
    """The latest state the node's agent reported, with protocol bookkeeping."""

    agent_id: str
    agent_version: str
    seq: int
    topology: NodeTopology
    allocations: tuple[ContainerAllocation, ...] = ()
    last_seen: float  # inventory clock
    connected: bool = True


class Taint(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    key: str
    effect: str
    value: str | None = None


class KubeNode(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The parts of a Node object the inventory uses."""

    name: str
    labels: dict[str, str] = {}
    allocatable: dict[str, int] = {}
    capacity: dict[str, int] = {}
    ready: bool = True
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    topology: NodeTopology | None = None  # what the agent published (topos.io/topology)
    topology_error: str | None = None  # why that annotation was not used (malformed, too large)
    cached_models: frozenset[str] = frozenset()  # the agent's topos.io/models


class BoundPod(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A pod bound to a node and not finished: it holds capacity whoever scheduled it."""

    uid: str
    namespace: str
    name: str
    node: str
    scheduler: str = "default-scheduler"
    requests: dict[str, int] = {}
    nonzero: NonZero | None = None  # cpu and memory as kube's scoring counts them (None: requests)
    assigned_gpus: tuple[str, ...] = ()  # from topos.io/assigned-gpus, when Topos placed it
    held_gpus: tuple[str, ...] = ()  # what the agent says it holds (PodResources); set by the store
    priority: int = 0
    # What the scheduler needs about pods already placed (coordinator.engine reads these):
    labels: dict[str, str] = {}  # for pod (anti-)affinity and topology spread of later pods
    annotations: dict[str, str] = {}  # only scheduling keys (topos.io/*, KubeNexus NUMA)
    affinity: dict[str, Any] = {}  # spec.affinity podAffinity/podAntiAffinity, as written
    host_ports: tuple[HostPort, ...] = ()  # hostPort entries: taken on the node for other pods
    volume_claims: tuple[str, ...] = ()  # the PVCs its volumes name (ReadWriteOncePod conflicts)
    inline_volumes: tuple[InlineVolume, ...] = ()  # in-tree volumes (NodeVolumeLimits counts)
    # For gangs (coordinator.engine.gangs): the run a member belongs to, and whether it is going.
    owner_uid: str = ""  # the workload's UID (JobSet label, controller ownerReference); bare: ""
    owner_kind: str = ""  # that workload's kind (ReplicaSet, Job, JobSet, ...)
    terminating: bool = False  # metadata.deletionTimestamp is set: still holds capacity
    scheduling_group: str = ""  # spec.schedulingGroup.podGroupName: a Workload-API gang member
    # For preemption's protections (coordinator.core.preemption.protections):
    priority_class: str = ""  # spec.priorityClassName
    started_at: float | None = None  # status.startTime, seconds since the epoch; None: not yet
    # For defragmentation (coordinator.core.preemption.relocate): what a controller-owned pod
    # is placed by when recreated — its controller reference and the spec fields the filters
    # read (translate.placement_template); empty for a bare pod.
    template: dict[str, Any] = {}


class PodUsage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    namespace: str
    name: str
    scheduler: str
    requests: dict[str, int] = {}


class GpuHolder(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One pod holding a GPU: the whole device, or its share (``topos.io/gpu-share``)."""

    pod: str  # "namespace/pod"
    source: str  # "agent" (PodResources) or "annotation"
    fraction: float | None = None  # its share of the GPU's compute; None: the whole device
    memory_mib: int | None = None  # its share of the GPU's memory


class GpuUse(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Who holds one GPU or MIG device (``None`` when free)."""

    uuid: str
    holder: str | None = None  # "namespace/pod": the first of ``holders``
    source: str | None = None  # "agent" (PodResources) or "annotation"
    holders: tuple[GpuHolder, ...] = ()  # every pod on it: several when the GPU is shared
    free_fraction: float | None = None  # a shared GPU: the compute its holders leave


class DraShare(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One share of a DRA device allocated to several claims (consumable capacity)."""

    device: str  # "driver/pool/device"
    gpu: str | None = None  # the device's ``uuid`` attribute (the GPU, for a GPU)
    claim: str  # "namespace/name"
    share_id: str
    consumed: dict[str, str] = {}  # capacity name → quantity


class NodeState(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The merged view of one node (what ``GET /v1/nodes/{name}`` shows)."""

    name: str
    stale: bool
    connected: bool
    schedulable: bool
    ready: bool | None = None  # None: no Node object known
    unschedulable: bool = False
    agent_id: str | None = None
    agent_version: str | None = None
    seq: int | None = None
    last_seen_age_s: float | None = None
    labels: dict[str, str] = {}
    taints: tuple[Taint, ...] = ()
    allocatable: dict[str, int] = {}
    requested: dict[str, int] = {}
    free: dict[str, int] = {}
    topology: NodeTopology | None = None
    # "stream" (the agent's capacity stream) or "annotation" (the Node's topos.io/topology, while
    # no stream has described the node): coordinator.inventory.record
    topology_source: str | None = None
    annotation_error: str | None = None  # why the Node's topos.io/topology was not used
    cached_models: frozenset[str] = frozenset()  # models in the node's cache (topos.io/models)
    allocations: tuple[ContainerAllocation, ...] = ()
    gpu_use: tuple[GpuUse, ...] = ()
    pods: tuple[PodUsage, ...] = ()
    # Pods Topos placed whose devices, as the kubelet reports them, differ from its assignment.
    mismatches: tuple[GpuMismatch, ...] = ()
    # Shares of the node's DRA devices (filled by the API from the claims it watches).
    dra_shares: tuple[DraShare, ...] = ()

    @property
    def free_gpus(self) -> int:
        """Whole GPUs free: ``nvidia.com/gpu`` not requested, and no more than the GPUs nobody
        holds — a GPU pods share is not free, though its holders request no ``nvidia.com/gpu``."""
        free = self.free.get(GPU_RESOURCE, 0)
        whole = [g.uuid for g in self.topology.gpus if not g.mig_enabled] if self.topology else []
        if not whole:
            return free
        held = {u.uuid for u in self.gpu_use if u.holders or u.holder}
        return min(free, sum(1 for uuid in whole if uuid not in held))
