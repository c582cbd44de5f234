"""Raw Node and Pod objects (the API server's JSON) → the inventory's :class:`KubeNode` and
:class:`BoundPod`.

A bound pod holds its effective requests, by the core's one copy of Kubernetes' rule
(:func:`coordinator.core.podspec.resources.held_requests`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from common import labels
from common.model import ModelError, NodeTopology, topology_from_json
from common.quantity import QuantityError
from common.wire import FrameError
from coordinator.core.gangs.identity import workload_owner
from coordinator.core.podspec.resources import held_requests, quantity
from coordinator.core.snapshot.podinfo import bound_host_ports
from coordinator.inventory.state import ASSIGNED_GPUS_ANNOTATION, BoundPod, KubeNode, Taint
from coordinator.inventory.validate import check_report

log = logging.getLogger(__name__)

TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
#: Annotations of bound pods the scheduler reads back (assigned GPUs/NUMA, NUMA policy).
SCHEDULING_ANNOTATION_PREFIXES: Final = ("topos.io/", "numa.scheduling.kubenexus.io/")


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


def published_topology(name: str, annotations: Mapping[str, Any]) -> NodeTopology | None:
    """The topology the node's agent published (``topos.io/topology``), if it is valid."""
    text = annotations.get(labels.TOPOLOGY)
    if not isinstance(text, str) or not text:
        return None
    try:
        topology = topology_from_json(text)
        check_report(topology)
    except (ModelError, FrameError) as exc:
        log.warning("ignoring %s of node %s: %s", labels.TOPOLOGY, name, exc)
        return None
    return topology


def kube_node(obj: Mapping[str, Any]) -> KubeNode:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    name = str(meta.get("name", ""))
    ready = False
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    taints = tuple(
        Taint(key=str(t.get("key", "")), effect=str(t.get("effect", "")), value=t.get("value"))
        for t in spec.get("taints") or ()
        if isinstance(t, Mapping)
    )
    return KubeNode(
        name=name,
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        allocatable=_resources(status.get("allocatable"), f"node {name}"),
        capacity=_resources(status.get("capacity"), f"node {name}"),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable", False)),
        taints=taints,
        resource_version=str(meta.get("resourceVersion", "")),
        topology=published_topology(name, meta.get("annotations") or {}),
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
    annotations = meta.get("annotations") or {}
    assigned = str(annotations.get(ASSIGNED_GPUS_ANNOTATION, ""))
    namespace = str(meta.get("namespace") or "default")
    owner = workload_owner(obj)
    return BoundPod(
        uid=str(meta.get("uid") or f"{namespace}/{meta.get('name')}"),
        namespace=namespace,
        name=str(meta.get("name", "")),
        node=str(node),
        scheduler=str(spec.get("schedulerName", "default-scheduler")),
        phase=phase,
        requests=held_requests(spec),
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
        owner_uid=owner[0],
        owner_kind=owner[1],
        terminating=bool(meta.get("deletionTimestamp")),
        scheduling_group=_scheduling_group(spec),
    )


def _scheduling_group(spec: Mapping[str, Any]) -> str:
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return name if isinstance(name, str) else ""
