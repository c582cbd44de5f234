"""Raw Node and Pod objects (the API server's JSON) → the inventory's :class:`KubeNode` and
:class:`BoundPod`.

A bound pod holds its effective requests, and its cpu and memory as kube's scoring counts them,
by the core's one copy of Kubernetes' rule (:func:`coordinator.core.podspec.resources.held_demand`).
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeVar, cast

import msgspec

from common import labels
from common.model import ModelError, NodeTopology, topology_from_json
from common.quantity import QuantityError
from common.wire import FrameError
from coordinator.core.gangs.identity import workload_owner
from coordinator.core.podspec.intree import bound_inline_volumes
from coordinator.core.podspec.resources import held_demand, quantity
from coordinator.core.podspec.shapes import ByShape, pod_shape
from coordinator.core.podspec.volumes import bound_claim_names
from coordinator.core.snapshot.podinfo import bound_host_ports
from coordinator.inventory.state import ASSIGNED_GPUS_ANNOTATION, BoundPod, KubeNode, Taint
from coordinator.inventory.validate import check_report

log = logging.getLogger(__name__)
_T = TypeVar("_T")

TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
#: Annotations of bound pods the scheduler reads back (assigned GPUs/NUMA, NUMA policy, the
#: placement keys under their seed-003 spelling: recovery re-places a gang by them, and the slice
#: keys: an exclusive domain stays its holder's).
SCHEDULING_ANNOTATION_PREFIXES: Final = (
    "topos.io/",
    "numa.scheduling.kubenexus.io/",
    "topology.scheduler/",
    "scheduling.k8s.io/group-name",  # Volcano's PodGroup of a gang member
    "pod-group-name",  # KAI's
    # slices and exclusive topology: whose domain a running pod holds (core/gangs/slices.py)
    "kueue.x-k8s.io/podset-",
    "alpha.jobset.sigs.k8s.io/",
    "leaderworkerset.sigs.k8s.io/",
)
_MAPS_SHARED: Final = 4096  # distinct allocatable/capacity maps a TopologyMemo shares


def _resources(raw: object, where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    if not isinstance(raw, Mapping):
        return out
    for name, value in raw.items():
        try:
            out[str(name)] = quantity(str(name), value)
        except QuantityError as exc:
            log.warning("ignoring %s of %s: %s", name, where, exc)
    return out


def published_topology(
    name: str, annotations: Mapping[str, Any]
) -> tuple[NodeTopology | None, str | None]:
    """The topology the node's agent published (``topos.io/topology``) if it is valid, else why
    not (``None, None``: nothing published)."""
    text = annotations.get(labels.TOPOLOGY)
    if not isinstance(text, str) or not text:
        return None, None
    size = len(text.encode())
    if size > labels.TOPOLOGY_ANNOTATION_MAX_BYTES:
        reason = f"{size} bytes, over the {labels.TOPOLOGY_ANNOTATION_MAX_BYTES}-byte limit"
    else:
        try:
            topology = topology_from_json(text)
            check_report(topology)
        except (ModelError, FrameError) as exc:
            reason = str(exc)[:300]
        else:
            return topology, None
    log.warning("node %s has no topology from its %s: %s", name, labels.TOPOLOGY, reason)
    return None, f"{labels.TOPOLOGY} ignored: {reason}"


class TopologyMemo:
    """The topology last parsed for each node, by a digest of its ``topos.io/topology`` text: a
    Node update that leaves the annotation alone (a status heartbeat, a label edit) does not
    parse and validate it again (~0.8 ms for a DGX H100)."""

    def __init__(self) -> None:
        self._by_node: dict[str, tuple[bytes, NodeTopology | None, str | None]] = {}
        self._parts: dict[object, object] = {}  # one copy of each equal part, shared by nodes
        self._maps: dict[tuple[tuple[object, object], ...], dict[str, int]] = {}
        self._labels: dict[str, dict[str, str]] = {}  # each node's, as last translated

    def _shared(self, value: _T) -> _T:
        return cast(_T, self._parts.setdefault(value, value))

    def resources(self, raw: object, where: str) -> dict[str, int]:
        """:func:`_resources` of an allocatable/capacity map, parsed once for equal maps and then
        one dict for all (alike machines, and a heartbeat's unchanged map; never changed in
        place): up to :data:`_MAPS_SHARED` distinct maps, those with no bad quantity."""
        if not isinstance(raw, Mapping):
            return {}
        key = tuple(raw.items())
        try:
            hit = self._maps.get(key)
        except TypeError:  # an unhashable value: not a quantity anyway
            return _resources(raw, where)
        if hit is None:
            hit = _resources(raw, where)
            if len(hit) == len(key) and len(self._maps) < _MAPS_SHARED:
                self._maps[key] = hit
        return hit

    def labels(self, name: str, raw: object) -> dict[str, str]:
        """The node's labels (:func:`interned_labels`); while they stay the same, the dict it
        had."""
        last = self._labels.get(name)
        if last is not None and last == raw:
            return last
        labels = self._labels[name] = interned_labels(raw)
        return labels

    def _interned(self, topology: NodeTopology) -> NodeTopology:
        """The topology with the parts alike machines have alike (link matrices, NICs, NUMA
        CPU lists, GPU CPU affinities) shared: 20 KB → 4 KB a DGX H100, 80 MB at 5,000."""
        s = self._shared
        gpus = tuple(
            msgspec.structs.replace(
                g,
                cpu_affinity=s(g.cpu_affinity),
                numa_affinity=s(g.numa_affinity),
                mig_creatable=s(g.mig_creatable),
                product=s(g.product),
                compute_capability=s(g.compute_capability),
                pci_bus_id=s(g.pci_bus_id),
            )
            for g in topology.gpus
        )
        return msgspec.structs.replace(
            topology,
            driver_version=s(topology.driver_version),
            cuda_version=s(topology.cuda_version),
            gpus=gpus,
            links=s(topology.links),
            nics=s(topology.nics),
            nic_links=s(topology.nic_links),
            nic_nic_links=s(topology.nic_nic_links),
            numa_nodes=s(topology.numa_nodes),
        )

    def topology(
        self, name: str, annotations: Mapping[str, Any]
    ) -> tuple[NodeTopology | None, str | None]:
        """As :func:`published_topology`, parsed again only when the text changed."""
        text = annotations.get(labels.TOPOLOGY)
        if not isinstance(text, str) or not text:
            self._by_node.pop(name, None)
            return None, None
        digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
        seen = self._by_node.get(name)
        if seen is not None and seen[0] == digest:
            return seen[1], seen[2]
        topology, error = published_topology(name, annotations)
        if topology is not None:
            topology = self._interned(topology)
        self._by_node[name] = (digest, topology, error)
        return topology, error

    def forget(self, name: str) -> None:
        self._by_node.pop(name, None)
        self._labels.pop(name, None)

    def keep_only(self, names: Iterable[str]) -> None:
        keep = set(names)
        for held in (self._by_node, self._labels):
            for name in [n for n in held if n not in keep]:
                del held[name]


def node_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Node object :func:`kube_node` reads (no managed fields, images, addresses,
    other annotations): what the inventory's watch keeps of a listed Node until it is read."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    annotations = meta.get("annotations") or {}
    kept = {k: annotations[k] for k in (labels.TOPOLOGY, labels.MODELS) if k in annotations}
    return {
        "metadata": {"name": meta.get("name"), "labels": meta.get("labels"), "annotations": kept},
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {
            "allocatable": status.get("allocatable"),
            "capacity": status.get("capacity"),
            "conditions": [c for c in status.get("conditions") or () if c.get("type") == "Ready"],
        },
    }


def bound_pod_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Pod :func:`bound_pod` reads: no managed fields, of the status its phase
    and start time."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    status = obj.get("status") or {}
    kept = {"phase": status.get("phase")}
    if status.get("startTime"):
        kept["startTime"] = status["startTime"]
    return {"metadata": meta, "spec": obj.get("spec") or {}, "status": kept}


def kube_node(obj: Mapping[str, Any], memo: TopologyMemo | None = None) -> KubeNode:
    """``memo``: reuse the topology parsed from an unchanged annotation."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    name = str(meta.get("name", ""))
    annotations = meta.get("annotations") or {}
    ready = False
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    taints = tuple(
        Taint(key=str(t.get("key", "")), effect=str(t.get("effect", "")), value=t.get("value"))
        for t in spec.get("taints") or ()
        if isinstance(t, Mapping)
    )
    topology, topology_error = (
        published_topology(name, annotations) if memo is None else memo.topology(name, annotations)
    )
    where = f"node {name}"
    if memo is None:
        labels = interned_labels(meta.get("labels"))
        allocatable = _resources(status.get("allocatable"), where)
        capacity = _resources(status.get("capacity"), where)
    else:
        labels = memo.labels(name, meta.get("labels"))
        allocatable = memo.resources(status.get("allocatable"), where)
        capacity = memo.resources(status.get("capacity"), where)
    return KubeNode(
        name=name,
        labels=labels,
        allocatable=allocatable,
        capacity=capacity,
        ready=ready,
        unschedulable=bool(spec.get("unschedulable", False)),
        taints=taints,
        topology=topology,
        topology_error=topology_error,
        cached_models=cached_models(name, annotations),
    )


def interned_labels(raw: object) -> dict[str, str]:
    """Labels as ``str → str``, each key and value one shared string: 5,000 nodes carry the same
    few dozen keys and mostly the same values (17 MiB of copies at 5,000 DGX nodes)."""
    if not isinstance(raw, Mapping):
        return {}
    return {sys.intern(str(k)): sys.intern(str(v)) for k, v in raw.items()}


def cached_models(name: str, annotations: Mapping[str, Any]) -> frozenset[str]:
    """The model ids the node's agent published (``topos.io/models``); malformed: none."""
    text = annotations.get(labels.MODELS)
    if not isinstance(text, str) or not text:
        return frozenset()
    try:
        models = msgspec.json.decode(text, type=list[str])
    except msgspec.DecodeError as exc:
        log.warning("ignoring %s of node %s: %s", labels.MODELS, name, exc)
        return frozenset()
    return frozenset(m for m in models if m)


def ran_to_end(obj: Mapping[str, Any]) -> bool:
    """Whether a pod's object says it ran to its end: phase Succeeded or Failed, not being
    deleted, not ``Evicted`` by its kubelet and with no ``DisruptionTarget`` condition
    (preempted, evicted, drained) where the object still carries those."""
    status = obj.get("status") or {}
    if status.get("phase") not in ("Succeeded", "Failed") or status.get("reason") == "Evicted":
        return False
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return not any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in status.get("conditions") or ()
        if isinstance(c, Mapping)
    )


def bound_pod(obj: Mapping[str, Any]) -> BoundPod | None:
    """The pod as capacity held on its node, or ``None`` if unbound or finished."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    node = spec.get("nodeName")
    phase = str(status.get("phase", "Pending"))
    if not node or phase in TERMINAL_PHASES:
        return None
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name", ""))
    uid = str(meta.get("uid") or f"{namespace}/{meta.get('name')}")
    shape = pod_shape(meta, spec, _OWN_SPEC)
    known = _SHAPES.get(shape)
    if known is not None:
        return msgspec.structs.replace(
            known,
            uid=uid,
            name=name,
            node=str(node),
            volume_claims=bound_claim_names(spec, name),
            inline_volumes=bound_inline_volumes(spec),
            terminating=bool(meta.get("deletionTimestamp")),
            started_at=_timestamp(status.get("startTime")),
            template=placement_template(meta, spec) if known.owner_kind else {},
        )
    pod = _bound_pod(obj, meta, spec, status, node, uid, namespace, name)
    _SHAPES.keep(shape, pod)
    return pod


#: Bound pods read, by their shape (:mod:`~coordinator.core.podspec.shapes`: their spec less
#: its node, node affinity and volumes): the pods of one workload share one, so each after the
#: first is the first's translation with its own uid, name, node, volumes, deletion, start and
#: placement template (it holds the node affinity).
_SHAPES: Final = ByShape[BoundPod]()
_OWN_SPEC: Final = ("volumes", "nodeName")


def _bound_pod(
    obj: Mapping[str, Any],
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    node: object,
    uid: str,
    namespace: str,
    name: str,
) -> BoundPod:
    annotations = meta.get("annotations") or {}
    assigned = str(annotations.get(ASSIGNED_GPUS_ANNOTATION, ""))
    owner = workload_owner(obj)
    demand = held_demand(spec)
    return BoundPod(
        uid=uid,
        namespace=namespace,
        name=name,
        node=str(node),
        scheduler=str(spec.get("schedulerName", "default-scheduler")),
        requests=demand.requests,
        nonzero=demand.held,
        assigned_gpus=tuple(u.strip() for u in assigned.split(",") if u.strip()),
        priority=int(spec.get("priority") or 0),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        annotations={
            str(k): str(v)
            for k, v in annotations.items()
            if str(k).startswith(SCHEDULING_ANNOTATION_PREFIXES)
        },
        affinity={
            k: v
            for k, v in (spec.get("affinity") or {}).items()
            if k in ("podAffinity", "podAntiAffinity")
        },
        host_ports=bound_host_ports(spec),
        volume_claims=bound_claim_names(spec, name),
        inline_volumes=bound_inline_volumes(spec),
        owner_uid=owner[0],
        owner_kind=owner[1],
        terminating=bool(meta.get("deletionTimestamp")),
        scheduling_group=_scheduling_group(spec),
        priority_class=str(spec.get("priorityClassName") or ""),
        started_at=_timestamp(status.get("startTime")),
        template=placement_template(meta, spec) if owner[1] else {},
    )


def restatused(pod: BoundPod, status: Mapping[str, Any]) -> BoundPod | None:
    """``pod`` after a change of its status alone (its metadata and spec as they were): what
    :func:`bound_pod` reads of a status is its phase (``None``: it ended) and start time."""
    if str(status.get("phase", "Pending")) in TERMINAL_PHASES:
        return None
    started = _timestamp(status.get("startTime"))
    return pod if started == pod.started_at else msgspec.structs.replace(pod, started_at=started)


#: The spec fields a pod is placed by (filters and scores), kept for a recreated pod's placement.
_PLACED_BY: Final = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "overhead",
    "resources",  # pod-level requests (PodLevelResources)
    "restartPolicy",
)
_CONTAINER_KEYS: Final = ("name", "resources", "ports", "restartPolicy")


def placement_template(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """What a controller would recreate the pod with, as far as placing it goes: its owner
    references and the spec fields filters and scores read (containers with their resources and
    ports only)."""
    kept: dict[str, Any] = {k: spec[k] for k in _PLACED_BY if spec.get(k)}
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        if isinstance(items, list):
            kept[key] = [
                {k: c[k] for k in _CONTAINER_KEYS if k in c}
                for c in items
                if isinstance(c, Mapping)
            ]
    owners = meta.get("ownerReferences")
    return {"ownerReferences": owners if isinstance(owners, list) else [], "spec": kept}


def _timestamp(text: object) -> float | None:
    """An RFC 3339 time (``2026-11-29T10:20:04Z``) as seconds since the epoch; else ``None``."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _scheduling_group(spec: Mapping[str, Any]) -> str:
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return name if isinstance(name, str) else ""
