"""What a pod asks of the scheduler, read purely from the Pod object the API server returns.

:func:`parse_pod` turns a Pod (a ``dict`` decoded from JSON or YAML) into a :class:`PodRequest`,
or, when anything is wrong with it, into a :class:`PodSpecError` naming the bad field. It never
raises: a malformed pod must be reported on that pod and harm nothing else.

Each part is read by the module named for it: :mod:`~coordinator.core.podspec.resources`
(effective requests), :mod:`~coordinator.core.podspec.affinity`,
:mod:`~coordinator.core.podspec.tolerations`, :mod:`~coordinator.core.podspec.spread`,
:mod:`~coordinator.core.podspec.ports`, :mod:`~coordinator.core.podspec.toposkeys` (GPU, NUMA,
MIG keys) and :mod:`~coordinator.core.podspec.gangkeys` (gang keys, with durations from
:mod:`~coordinator.core.podspec.durations`) and :mod:`~coordinator.core.podspec.slicekeys` (slices
and exclusive topology).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Final

from common import podkeys
from coordinator.core.podspec.affinity import (
    AffinityTerm,
    NodeAffinity,
    WeightedAffinityTerm,
    node_affinity,
    parse_affinity_terms,
)
from coordinator.core.podspec.claims import (
    ContainerExtended,
    PodClaim,
    container_extended,
    extended_claim,
    pod_claims,
)
from coordinator.core.podspec.controller import ControllerRef, controller_ref
from coordinator.core.podspec.fields import (
    FieldError,
    integer,
    key_choice,
    mapping,
    sequence,
    str_map,
    text,
)
from coordinator.core.podspec.gangkeys import GangLabels, declared_gang
from coordinator.core.podspec.inherit import INHERITED
from coordinator.core.podspec.intree import InlineVolume, inline_volumes
from coordinator.core.podspec.poolkeys import PoolScheduling, pool_scheduling
from coordinator.core.podspec.ports import HostPort, host_ports
from coordinator.core.podspec.protections import min_runtime, preemption_delay
from coordinator.core.podspec.resources import DEFAULT_NONZERO, NonZero, pod_demand
from coordinator.core.podspec.shapes import ByShape, pod_shape
from coordinator.core.podspec.sharing import GpuShare, gpu_share
from coordinator.core.podspec.slicekeys import SliceAsk, slice_ask
from coordinator.core.podspec.spread import SpreadConstraint, spread_constraints
from coordinator.core.podspec.tolerations import Toleration, tolerations
from coordinator.core.podspec.toposkeys import gpu_memory_mib, mig_demand, numa
from coordinator.core.podspec.volumes import PodVolumeClaim, pod_volume_claims
from coordinator.core.status import Reason, Status

__all__ = ["MAX_GPUS_PER_POD", "PodRequest", "PodSpecError", "parse_pod"]

# The largest GPU nodes hold 16 GPUs; 64 leaves room for future boxes and still catches typos
# like "800" or "1e6".
MAX_GPUS_PER_POD: Final = 64


@dataclass(frozen=True, slots=True)
class PodSpecError:
    """Why a pod cannot be scheduled as written: the field path and what is wrong with it."""

    pod_key: str
    field: str
    message: str

    @property
    def text(self) -> str:
        return f"invalid {self.field}: {self.message}"

    @property
    def status(self) -> Status:
        return Status.unresolvable(Reason.INVALID_POD, detail=self.text)


@dataclass(frozen=True, slots=True)
class PodRequest:
    """Everything the scheduling core needs to know about a pod waiting to be placed."""

    namespace: str
    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0
    priority_class_name: str = ""
    preemption_policy: str = "PreemptLowerPriority"
    scheduler_name: str = podkeys.SCHEDULER_NAME
    # resource name → amount: cpu in millicores, all else in whole units; zero entries omitted
    requests: Mapping[str, int] = field(default_factory=dict)
    #: cpu and memory as NodeResourcesFit's scoring counts them (a container without a request
    #: counts 100m, 200 MiB: :mod:`~coordinator.core.podspec.resources`)
    nonzero: NonZero = DEFAULT_NONZERO
    #: what it adds to its node's ``nonzero_requested`` once there (differs from ``nonzero``
    #: only with pod-level requests that leave out what a container names)
    nonzero_on_node: NonZero = DEFAULT_NONZERO
    gpus: int = 0  # whole GPUs (nvidia.com/gpu), 0 when the pod asks for MIG instances instead
    # part of one GPU (topos.io/gpu-fraction, -memory and aliases); gpus is then 0
    share: GpuShare | None = None
    mig: tuple[tuple[str, int], ...] = ()  # (profile, count), sorted by profile
    mig_from_annotation: bool = False  # MIG demand comes from topos.io/mig-profile
    gpu_memory_min_mib: int | None = None
    gpu_locality: str = "any"
    numa_policy: str | None = None
    numa_resources: frozenset[str] = frozenset()
    node_selector: tuple[tuple[str, str], ...] = ()
    node_affinity: NodeAffinity | None = None
    pod_affinity: tuple[AffinityTerm, ...] = ()
    pod_affinity_preferred: tuple[WeightedAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[AffinityTerm, ...] = ()
    pod_anti_affinity_preferred: tuple[WeightedAffinityTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    # the ownerReference marked controller (kube's default topology spreading selects by it)
    controller: ControllerRef | None = None
    gang: GangLabels | None = None
    placement: str | None = None
    node_name: str = ""  # spec.nodeName, set when already bound
    host_ports: tuple[HostPort, ...] = ()  # ports the pod binds on its node
    claims: tuple[PodClaim, ...] = ()  # spec.resourceClaims (DRA)
    # the PersistentVolumeClaims spec.volumes names (persistentVolumeClaim, ephemeral)
    volume_claims: tuple[PodVolumeClaim, ...] = ()
    # in-tree volumes written in spec.volumes (awsElasticBlockStore, ...), translated to CSI
    inline_volumes: tuple[InlineVolume, ...] = ()
    # spec.schedulingGates names: while any is left the pod is not scheduled (kube's PreEnqueue)
    scheduling_gates: tuple[str, ...] = ()
    # status.extendedResourceClaimStatus.resourceClaimName: the claim made for its extended
    # resources (KEP-5004), once created
    extended_claim: str = ""
    # extended resources per container (what a KEP-5004 claim would ask, where DRA serves them)
    container_extended: tuple[ContainerExtended, ...] = ()
    # An AgentPool's pod (neuronetes.io/pool, model, scheduling keys); None for other pods
    pool: PoolScheduling | None = None
    # slices and exclusive topology (topos.io/slice-*, Kueue, JobSet, LWS keys); None for none
    slices: SliceAsk | None = None
    # preemption protections (topos.io/min-runtime, topos.io/preemption-delay); None: not given
    min_runtime_s: float | None = None
    preemption_delay_s: float | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def mig_count(self) -> int:
        return sum(n for _, n in self.mig)

    @property
    def wants_devices(self) -> bool:
        return self.gpus > 0 or bool(self.mig) or self.share is not None

    @property
    def has_affinity_terms(self) -> bool:
        return bool(
            self.pod_affinity
            or self.pod_anti_affinity
            or self.pod_affinity_preferred
            or self.pod_anti_affinity_preferred
        )


def parse_pod(obj: object) -> PodRequest | PodSpecError:
    """Read a Pod object (as the API server returns it) into a :class:`PodRequest`."""
    meta: Mapping[str, object] = {}
    try:
        if not isinstance(obj, Mapping):
            raise FieldError("pod", "must be a mapping")
        meta = mapping(obj, "metadata", "")
        spec = mapping(obj, "spec", "")
        status = mapping(obj, "status", "")
        shape = pod_shape(meta, spec)
        known = _SHAPES.get(shape)
        if known is not None:
            return _own_parts(known, meta, spec, status)
        parsed = _parse(meta, spec, status)
        if parsed.gang is None or parsed.gang.source != "pod":  # else named after the pod
            _SHAPES.keep(shape, parsed)
        return parsed
    except FieldError as bad:
        ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else "default"
        name = meta.get("name") if isinstance(meta.get("name"), str) else "?"
        path = bad.field.lstrip(".")
        return PodSpecError(f"{ns}/{name}", path, bad.message + _inherited_hint(meta, path))


def _inherited_hint(meta: Mapping[str, object], path: str) -> str:
    """Where to mend a bad key the pod got from its workload (``topos.io/inherited`` lists
    it): on the workload, not in the pod template, which does not have it."""
    annotations = meta.get("annotations")
    if not isinstance(annotations, Mapping) or not path.startswith("metadata.annotations["):
        return ""
    key = path.removeprefix("metadata.annotations[").partition("]")[0]
    listed = str(annotations.get(INHERITED, "")).split(",")
    if key not in listed:
        return ""
    return (
        f"; the pod inherited {key} from the workload that made it (its Job, JobSet, "
        "LeaderWorkerSet, Deployment…): change it there"
    )


#: Pods read, by their shape (:mod:`~coordinator.core.podspec.shapes`): the pods of one workload
#: share one, so each after the first is the first's reading with its own name, uid, node
#: affinity, volumes and claims (:func:`_own_parts`) — a pod's reading was a tenth of the CPU it
#: costs the scheduler from its watch event to its Scheduled Event.
_SHAPES: Final = ByShape[PodRequest]()
#: What a pod's reading takes from its name, uid, volumes or status: read for each pod.
_OWN: Final = (
    "name",
    "uid",
    "node_affinity",
    "volume_claims",
    "inline_volumes",
    "claims",
    "extended_claim",
)
_FIELDS: Final = tuple(f.name for f in fields(PodRequest))
_VALUES: Final = operator.attrgetter(*_FIELDS)
_AT: Final = tuple(_FIELDS.index(name) for name in _OWN)


def _own_parts(
    known: PodRequest,
    meta: Mapping[str, object],
    spec: Mapping[str, object],
    status: Mapping[str, object],
) -> PodRequest:
    """``known`` (a pod of the same shape) with this pod's own parts, read as :func:`_parse`
    reads them."""
    name = text(meta, "name", "metadata")
    affinity = mapping(spec, "affinity", "spec")
    own = (
        name,
        text(meta, "uid", "metadata"),
        node_affinity(
            mapping(affinity, "nodeAffinity", "spec.affinity"), "spec.affinity.nodeAffinity"
        ),
        pod_volume_claims(spec, name),
        inline_volumes(spec),
        pod_claims(spec, status),
        extended_claim(status),
    )
    values = list(_VALUES(known))
    for at, value in zip(_AT, own, strict=True):
        values[at] = value
    pod = object.__new__(PodRequest)
    for field_name, value in zip(_FIELDS, values, strict=True):
        object.__setattr__(pod, field_name, value)
    return pod


def _gates(spec: Mapping[str, object]) -> tuple[str, ...]:
    """The names in ``spec.schedulingGates``."""
    names = []
    for i, gate in enumerate(sequence(spec, "schedulingGates", "spec")):
        if not isinstance(gate, Mapping):
            raise FieldError(f"spec.schedulingGates[{i}]", "must be a mapping")
        names.append(text(gate, "name", f"spec.schedulingGates[{i}]"))
    return tuple(names)


def _parse(
    meta: Mapping[str, object], spec: Mapping[str, object], status: Mapping[str, object]
) -> PodRequest:
    namespace = text(meta, "namespace", "metadata") or "default"
    name = text(meta, "name", "metadata")
    labels = str_map(meta, "labels", "metadata")
    annotations = str_map(meta, "annotations", "metadata")
    if not sequence(spec, "containers", "spec"):
        raise FieldError("spec.containers", "must name at least one container")
    zeros: dict[str, str] = {}
    requests, nonzero, nonzero_on_node = pod_demand(spec, zeros)
    mig, gpus, mig_from_annotation = mig_demand(requests, annotations)
    if gpus > MAX_GPUS_PER_POD:
        raise FieldError(
            "spec.containers[*].resources.limits[nvidia.com/gpu]",
            f"{gpus} GPUs is more than any node holds (at most {MAX_GPUS_PER_POD})",
        )
    share = gpu_share(requests, annotations, gpus, zeros)
    if share is not None:
        if mig:
            raise FieldError(
                share.path,
                "MIG instances are never shared by fraction: ask for a MIG profile or a share, "
                "not both",
            )
        gpus = 0  # its one nvidia.com/gpu, if any, is a replica of the shared GPU
    locality = key_choice(podkeys.GPU_LOCALITY, annotations, podkeys.GPU_LOCALITY_VALUES) or "any"
    numa_policy, numa_resources = numa(annotations)
    priority = integer(spec, "priority", "spec")
    affinity = mapping(spec, "affinity", "spec")
    node_aff = node_affinity(
        mapping(affinity, "nodeAffinity", "spec.affinity"), "spec.affinity.nodeAffinity"
    )
    pa, pa_pref = parse_affinity_terms(
        mapping(affinity, "podAffinity", "spec.affinity"),
        "spec.affinity.podAffinity",
        namespace,
        labels,
    )
    paa, paa_pref = parse_affinity_terms(
        mapping(affinity, "podAntiAffinity", "spec.affinity"),
        "spec.affinity.podAntiAffinity",
        namespace,
        labels,
    )
    return PodRequest(
        namespace=namespace,
        name=name,
        uid=text(meta, "uid", "metadata"),
        labels=labels,
        priority=priority or 0,
        priority_class_name=text(spec, "priorityClassName", "spec"),
        preemption_policy=text(spec, "preemptionPolicy", "spec", "PreemptLowerPriority"),
        scheduler_name=text(spec, "schedulerName", "spec", "default-scheduler"),
        scheduling_gates=_gates(spec),
        requests=requests,
        nonzero=nonzero,
        nonzero_on_node=nonzero_on_node,
        gpus=gpus,
        share=share,
        mig=mig,
        mig_from_annotation=mig_from_annotation,
        gpu_memory_min_mib=gpu_memory_mib(annotations),
        gpu_locality=locality,
        numa_policy=numa_policy,
        numa_resources=numa_resources,
        node_selector=tuple(sorted(str_map(spec, "nodeSelector", "spec").items())),
        node_affinity=node_aff,
        pod_affinity=pa,
        pod_affinity_preferred=pa_pref,
        pod_anti_affinity=paa,
        pod_anti_affinity_preferred=paa_pref,
        tolerations=tolerations(spec),
        spread=spread_constraints(spec, labels),
        controller=controller_ref(meta),
        gang=declared_gang(spec, labels, annotations, pod_name=name),
        placement=key_choice(podkeys.PLACEMENT, annotations, podkeys.PLACEMENT_VALUES),
        node_name=text(spec, "nodeName", "spec"),
        host_ports=host_ports(spec),
        claims=pod_claims(spec, status),
        volume_claims=pod_volume_claims(spec, name),
        inline_volumes=inline_volumes(spec),
        extended_claim=extended_claim(status),
        container_extended=container_extended(spec),
        pool=pool_scheduling(labels, annotations),
        slices=slice_ask(annotations),
        min_runtime_s=min_runtime(annotations),
        preemption_delay_s=preemption_delay(annotations),
    )
