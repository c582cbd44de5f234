"""Raw Node and Pod objects (the API server's JSON) → the inventory's :class:`KubeNode` and
:class:`BoundPod`.

Pod requests follow kube-scheduler's accounting: per resource, the larger of the sum over app
containers (plus restartable init containers, i.e. sidecars) and the largest plain init
container, plus the pod overhead; an extended resource given only as a limit requests that limit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from common.quantity import QuantityError, parse_quantity, to_int, to_milli
from coordinator.core.snapshot.podinfo import bound_host_ports
from coordinator.inventory.state import ASSIGNED_GPUS_ANNOTATION, BoundPod, KubeNode, Taint

log = logging.getLogger(__name__)

_MILLI_RESOURCES: Final = frozenset({"cpu"})
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
#: Annotations of bound pods the scheduler reads back (assigned GPUs/NUMA, NUMA policy).
SCHEDULING_ANNOTATION_PREFIXES: Final = ("topos.io/", "numa.scheduling.kubenexus.io/")


#: Parsed text quantities, keyed by (in millis?, text): pods and nodes repeat a handful of
#: values ("1", "4Gi", "110"), and parsing through ``Fraction`` is most of a pod's translation.
_PARSED: dict[tuple[bool, str], int] = {}
_PARSED_MAX: Final = 4096


def quantity(resource: str, value: object) -> int:
    """A quantity in the inventory's unit for ``resource`` (millicores for cpu)."""
    milli = resource in _MILLI_RESOURCES
    if type(value) is str:
        key = (milli, value)
        cached = _PARSED.get(key)
        if cached is not None:
            return cached
        q = parse_quantity(value)  # bad text raises, and is never cached
        result = to_milli(q) if milli else to_int(q)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = result
        return result
    q = parse_quantity(value)
    return to_milli(q) if milli else to_int(q)


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
    )


def _container_requests(container: Mapping[str, Any], where: str) -> dict[str, int]:
    res = container.get("resources") or {}
    requests = _resources(res.get("requests"), where)
    for name, value in _resources(res.get("limits"), where).items():
        # Requests default to limits when only limits are given (always so for extended ones).
        requests.setdefault(name, value)
    return requests


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    where = f"pod {meta.get('namespace')}/{meta.get('name')}"
    total: dict[str, int] = {}
    for c in spec.get("containers") or ():
        for k, v in _container_requests(c, where).items():
            total[k] = total.get(k, 0) + v
    init_peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for c in spec.get("initContainers") or ():
        req = _container_requests(c, where)
        if c.get("restartPolicy") == "Always":  # a sidecar runs beside the app containers
            for k, v in req.items():
                sidecars[k] = sidecars.get(k, 0) + v
            continue
        for k, v in req.items():
            # A plain init container runs after the sidecars started before it.
            init_peak[k] = max(init_peak.get(k, 0), v + sidecars.get(k, 0))
    for k, v in sidecars.items():
        total[k] = total.get(k, 0) + v
    for k, v in init_peak.items():
        total[k] = max(total.get(k, 0), v)
    for k, v in _resources(spec.get("overhead"), where).items():
        total[k] = total.get(k, 0) + v
    return total


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
    return BoundPod(
        uid=str(meta.get("uid") or f"{namespace}/{meta.get('name')}"),
        namespace=namespace,
        name=str(meta.get("name", "")),
        node=str(node),
        scheduler=str(spec.get("schedulerName", "default-scheduler")),
        phase=phase,
        requests=pod_requests(obj),
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
    )
