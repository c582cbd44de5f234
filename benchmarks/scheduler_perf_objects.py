"""The objects scheduler_perf's workloads create besides Nodes and measured Pods: the DRA cases'
fake driver (``createResourceDriver``) and arbitrary objects from a file (``createAny``), and the
``churn`` op's objects (``create`` and ``recreate`` modes) — read as upstream's
``test/integration/scheduler_perf/{dra.go,operations.go,executor.go}`` (v1.36.3) read them.
``benchmarks/scheduler_perf.py`` runs them."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fnmatch
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from benchmarks.scheduler_perf_templates import ObjectTemplate
from common.kube import NODES, PODS, KubeClient
from common.kube.errors import AlreadyExists, NotFound
from common.kube.resources import (
    CONFIG_MAPS,
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    NAMESPACES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Resource,
)

SERVICES = Resource("", "v1", "services", namespaced=True, kind="Service")
#: The kinds a template may be (apiVersion, kind); upstream maps any kind through discovery.
KINDS: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r
    for r in (
        NODES,
        PODS,
        SERVICES,
        NAMESPACES,
        CONFIG_MAPS,
        DEVICE_CLASSES,
        RESOURCE_CLAIMS,
        RESOURCE_CLAIM_TEMPLATES,
        RESOURCE_SLICES,
        DEVICE_TAINT_RULES,
    )
}
#: The same by (group, kind): another version of one of them (the DRA subfolders' v1beta2
#: DeviceClass, v1alpha3 DeviceTaintRule) is created at the version the file names.
BY_GROUP: dict[tuple[str, str], Resource] = {(r.group, r.kind): r for r in KINDS.values()}
RECREATE, CREATE = "recreate", "create"


class WorkloadError(ValueError):
    """The workload YAML asks for something this runner does not read, or gives an op a bad
    parameter; the message names the key and the value."""


def resource_of(template: Mapping[str, Any], where: str) -> Resource:
    key = (str(template.get("apiVersion")), str(template.get("kind")))
    found = KINDS.get(key)
    group, _, version = key[0].rpartition("/")
    same = BY_GROUP.get((group, key[1]))
    if found is None and same is not None and version:
        found = dataclasses.replace(same, version=version)
    if found is None:
        known = ", ".join(f"{v}/{k}" for v, k in KINDS)
        raise WorkloadError(
            f"{where}: kind {key[0]}/{key[1]} is not one this runner creates ({known})"
        )
    return found


@dataclass(frozen=True, slots=True)
class ResourceDriver:
    """``createResourceDriver``: one ResourceSlice per Node whose name matches ``nodes`` (a
    glob), with ``max_claims_per_node`` devices, as upstream's ``resourceSlice()``."""

    driver: str
    nodes: str
    max_claims_per_node: int


@dataclass(frozen=True, slots=True)
class AnyObject:
    """``createAny``: ``count`` objects from a file (rendered with each one's index: a file
    without ``{{.Index}}`` makes one name, so one object), in ``namespace`` when its kind is
    namespaced."""

    template: ObjectTemplate
    resource: Resource
    namespace: str | None = None
    count: int = 1


def known_keys(op: Mapping[str, Any], allowed: Collection[str], opcode: str, where: str) -> None:
    """Refuse a key of ``op`` this runner does not read, naming it."""
    for key in op:
        if key not in allowed:
            raise WorkloadError(f"{where}.{key}: not read by this runner ({opcode})")


def flag(op: Mapping[str, Any], key: str, where: str) -> bool:
    """``op[key]`` as true or false (absent: false)."""
    value = op.get(key, False)
    if not isinstance(value, bool):
        raise WorkloadError(f"{where}.{key}: {value!r} is not true or false")
    return value


def positive_int(op: Mapping[str, Any], key: str, where: str, *, minimum: int = 1) -> int:
    value = op.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise WorkloadError(f"{where}.{key}: {value!r} is not an integer ≥ {minimum}")
    return value


def resource_driver(op: Mapping[str, Any], params: Mapping[str, Any], where: str) -> ResourceDriver:
    driver, nodes = op.get("driverName"), op.get("nodes")
    if not isinstance(driver, str) or not driver:
        raise WorkloadError(f"{where}.driverName: {driver!r} is not a driver name")
    if not isinstance(nodes, str) or not nodes:
        raise WorkloadError(f"{where}.nodes: {nodes!r} is not a node name pattern")
    param = op.get("maxClaimsPerNodeParam")
    if param is not None:
        if not isinstance(param, str) or not param.startswith("$") or param[1:] not in params:
            raise WorkloadError(
                f"{where}.maxClaimsPerNodeParam: {param!r} is not a parameter of this workload"
            )
        most = positive_int(params, param[1:], f"{where}.maxClaimsPerNodeParam {param}")
    else:
        most = positive_int(op, "maxClaimsPerNode", where)
    return ResourceDriver(driver, nodes, most)


def any_object(
    template: ObjectTemplate, op: Mapping[str, Any], where: str, count: int = 1
) -> AnyObject:
    resource = resource_of(template.render(0, max(count, 1)), f"{where}.templatePath")
    namespace = op.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        raise WorkloadError(f"{where}.namespace: {namespace!r} is not a namespace")
    if namespace and not resource.namespaced:
        raise WorkloadError(
            f"{where}.namespace: {namespace!r} set, but {resource.kind} is cluster-scoped"
        )
    if not namespace and resource.namespaced:
        raise WorkloadError(f"{where}.namespace: not set, but {resource.kind} is namespaced")
    if count != 1 and not template.templated:
        raise WorkloadError(
            f"{where}.count: {count!r}: more than one object needs a templated file "
            f"({{{{.Index}}}} in its name), {template.path.name} is not"
        )
    return AnyObject(template, resource, namespace, count)


def slice_body(driver: str, node: str, devices: int) -> dict[str, Any]:
    """Upstream's ``resourceSlice(driverName, nodeName, capacity)``: named for the node, one pool
    of one slice, devices ``instance-<i>`` with its four attributes and 1Gi of memory."""
    return {
        "apiVersion": RESOURCE_SLICES.api_version,
        "kind": "ResourceSlice",
        "metadata": {"name": node},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"instance-{i}",
                    "attributes": {
                        "model": {"string": "A100"},
                        "family": {"string": "GPU"},
                        "driverVersion": {"version": "1.2.3"},
                        "dra.example.com/numa": {"int": i},
                    },
                    "capacity": {"memory": {"value": "1Gi"}},
                }
                for i in range(devices)
            ],
        },
    }


async def publish_slices(kube: KubeClient, driver: ResourceDriver) -> int:
    """Create the driver's slices for the Nodes there are now; returns how many."""
    listed = await kube.list(NODES)
    names = [n["metadata"]["name"] for n in listed["items"]]
    chosen = [n for n in names if fnmatch.fnmatchcase(n, driver.nodes)]  # Go's filepath.Match
    sem = asyncio.Semaphore(32)

    async def one(node: str) -> None:
        async with sem:
            await kube.create(
                RESOURCE_SLICES, slice_body(driver.driver, node, driver.max_claims_per_node)
            )

    await asyncio.gather(*(one(n) for n in chosen))
    return len(chosen)


async def create_any(kube: KubeClient, obj: AnyObject) -> None:
    """Create them; one that exists already (made for an earlier scheduler's turn) is kept."""
    sem = asyncio.Semaphore(32)

    async def one(index: int) -> None:
        body = obj.template.render(index, obj.count)
        async with sem:
            with contextlib.suppress(AlreadyExists):
                await kube.create(obj.resource, body, namespace=obj.namespace)

    await asyncio.gather(*(one(i) for i in range(obj.count)))


@dataclass(frozen=True, slots=True)
class Churn:
    """A ``churn`` op: every ``interval_s``, for each template, ``create`` mode creates an object
    (for at most ``number`` ticks; 0: no limit); ``recreate`` mode cycles ``number`` slots per
    template, creating into an empty slot and deleting the object in a full one, so objects come
    and go (upstream's SchedulingWithMixedChurn: a Node, an unschedulable Pod, a Service)."""

    templates: tuple[tuple[dict[str, Any], Resource], ...]
    interval_s: float
    mode: str = CREATE
    number: int = 0
    namespace: str | None = None


def churn_op(templates: list[dict[str, Any]], op: Mapping[str, Any], where: str) -> Churn:
    mode = op.get("mode")
    if mode not in (CREATE, RECREATE):
        raise WorkloadError(f"{where}.mode: {mode!r} is not {CREATE!r} or {RECREATE!r}")
    number = op.get("number", 0)
    if isinstance(number, bool) or not isinstance(number, int) or number < 0:
        raise WorkloadError(f"{where}.number: {number!r} is not an integer ≥ 0")
    if mode == RECREATE and number == 0:
        raise WorkloadError(f"{where}.number: 0 in mode {RECREATE!r} (it needs at least one slot)")
    interval = op.get("intervalMilliseconds", 500)
    if isinstance(interval, bool) or not isinstance(interval, int) or interval <= 0:
        raise WorkloadError(f"{where}.intervalMilliseconds: {interval!r} is not a positive integer")
    namespace = op.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        raise WorkloadError(f"{where}.namespace: {namespace!r} is not a namespace")
    typed = tuple(
        (t, resource_of(t, f"{where}.templatePaths[{i}]")) for i, t in enumerate(templates)
    )
    return Churn(typed, interval / 1000, mode, number, namespace)


def churn_body(template: Mapping[str, Any], scheduler: str) -> dict[str, Any]:
    """A churn object as sent: a Pod is given the scheduler under test."""
    body = dict(template)
    if body.get("kind") == "Pod":
        body["spec"] = {**(body.get("spec") or {}), "schedulerName": scheduler}
    return body


async def run_churn(
    kube: KubeClient, churn: Churn, namespace: str, scheduler: str, stop: asyncio.Event
) -> int:
    """Churn until ``stop``; returns the objects created. What is left is deleted at the end."""
    slots_of: list[list[str | None]] = [[None] * max(churn.number, 1) for _ in churn.templates]
    alive: dict[tuple[Resource, str], None] = {}  # in creation order
    made = tick = 0
    while not stop.is_set() and (churn.mode == RECREATE or not churn.number or tick < churn.number):
        with contextlib.suppress(TimeoutError):  # upstream's ticker: the first tick after a wait
            await asyncio.wait_for(stop.wait(), churn.interval_s)
        if stop.is_set():
            break
        for (template, resource), slots in zip(churn.templates, slots_of, strict=True):
            ns = namespace if resource.namespaced else None
            slot = tick % len(slots)
            name = slots[slot]
            if churn.mode == RECREATE and name is not None:
                with contextlib.suppress(NotFound):
                    await kube.delete(resource, name, namespace=ns)
                alive.pop((resource, name), None)
                slots[slot] = None
                continue
            created = await kube.create(resource, churn_body(template, scheduler), namespace=ns)
            name = created["metadata"]["name"]
            alive[resource, name] = None
            made += 1
            if churn.mode == RECREATE:
                slots[slot] = name
        tick += 1
    for resource, name in alive:
        if resource is not PODS:  # pods: the turn's clean-up deletes the namespace's
            with contextlib.suppress(NotFound):
                await kube.delete(
                    resource, name, namespace=namespace if resource.namespaced else None
                )
    return made
