"""ResourceSlices, DeviceClasses and ResourceClaims (``resource.k8s.io/v1``) and DeviceTaintRules
(``resource.k8s.io/v1beta2``), typed.

Each ``parse_*`` reads one object as the API server returns it (a decoded JSON ``dict``) and
returns the typed object, or a :class:`DraObjectError` saying what is wrong with it: a bad object
is reported and left out; it harms nothing else.

Attribute names: a name without a domain (``uuid``) belongs to the driver's domain
(``gpu.nvidia.com/uuid``); ``resource.kubernetes.io/pciBusID`` is domain ``resource.kubernetes.io``,
name ``pciBusID``. :attr:`Device.attributes` is keyed by domain, then name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from common.quantity import QuantityError
from coordinator.core.dra.capacity import (
    Capacity,
    parse_amounts,
    parse_capacities,
    parse_requests,
)
from coordinator.core.dra.model import DeviceId, DeviceResult
from coordinator.core.dra.values import Quantity, SemVer
from coordinator.core.podspec.affinity import node_affinity
from coordinator.core.podspec.fields import FieldError, entry, integer, mapping, sequence, text
from coordinator.core.podspec.selectors import NodeSelectorTerm, match_node_terms
from coordinator.core.podspec.tolerations import Taint, Toleration

if TYPE_CHECKING:
    from celpy import celtypes

__all__ = [
    "Allocation",
    "Constraint",
    "Device",
    "DeviceClass",
    "DeviceRequest",
    "DeviceTaintRule",
    "DraObjectError",
    "NodeSelection",
    "ResourceClaim",
    "ResourceSlice",
    "SubRequest",
    "parse_device_class",
    "parse_device_taint_rule",
    "parse_resource_claim",
    "parse_resource_slice",
]

AttributeValue = int | bool | str | SemVer


@dataclass(frozen=True, slots=True)
class DraObjectError:
    """Why a watched DRA object cannot be used (it harms nothing else)."""

    kind: str
    key: str
    message: str
    #: A slice's node (``spec.nodeName``; ``"*"`` for ``allNodes``), where it can be read.
    node: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.key}: {self.message}"


@dataclass(frozen=True, slots=True)
class NodeSelection:
    """Which nodes a slice (or one device of it) is reachable from."""

    node_name: str = ""
    terms: tuple[NodeSelectorTerm, ...] | None = None  # nodeSelector
    all_nodes: bool = False

    def reaches(self, node: str, labels: Mapping[str, str]) -> bool:
        if self.all_nodes:
            return True
        if self.node_name:
            return self.node_name == node
        return self.terms is not None and match_node_terms(self.terms, node, labels)


@dataclass(frozen=True, slots=True, eq=False)
class Device:
    id: DeviceId
    attributes: Mapping[str, Mapping[str, AttributeValue]]
    capacity: Mapping[str, Mapping[str, Quantity]]
    taints: tuple[Taint, ...] = ()
    selection: NodeSelection | None = None  # per-device node selection, when the slice says so
    allow_multiple: bool = False  # allowMultipleAllocations: shared by claims, each taking part
    #: ``capacity`` by the names as written, with request policies (what requests consume)
    consumable: Mapping[str, Capacity] = field(default_factory=dict)
    #: selector expression → selected? or how it fails on this device (devices never change;
    #: a new slice is new devices)
    memo: dict[str, bool | str] = field(default_factory=dict, repr=False)
    _cel: list[celtypes.MapType] = field(default_factory=list, repr=False)

    def attribute(self, name: str) -> AttributeValue | None:
        """A (possibly domain-qualified) attribute; unqualified names are the driver's."""
        domain, _, short = name.rpartition("/")
        return self.attributes.get(domain or self.id.driver, {}).get(short)

    def cel(self) -> celtypes.MapType:
        """The ``device`` variable selectors see (built on first use)."""
        if not self._cel:
            from coordinator.core.dra.cel import device_value  # loads CEL: on first use

            self._cel.append(
                device_value(self.id.driver, self.attributes, self.capacity, self.allow_multiple)
            )
        return self._cel[0]


@dataclass(frozen=True, slots=True, eq=False)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    selection: NodeSelection | None  # None: per-device node selection
    devices: tuple[Device, ...]
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()  # CEL expressions
    config: tuple[Mapping[str, Any], ...] = ()  # spec.config entries (opaque driver config)
    extended_resource_name: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    """One taint for the devices its selector matches (KEP-5055): each of ``driver``, ``pool``
    and ``device`` that is set must equal the device's; no selector at all matches nothing."""

    name: str
    taint: Taint
    driver: str = ""
    pool: str = ""
    device: str = ""
    selects: bool = True  # False: the rule has no deviceSelector (it matches no device)

    def matches(self, device: DeviceId) -> bool:
        return (
            self.selects
            and (not self.driver or self.driver == device.driver)
            and (not self.pool or self.pool == device.pool)
            and (not self.device or self.device == device.device)
        )


@dataclass(frozen=True, slots=True)
class SubRequest:
    """An ``exactly`` request or one ``firstAvailable`` alternative."""

    name: str  # the result's request name ("req" or "req/sub")
    class_name: str
    selectors: tuple[str, ...] = ()
    mode: str = "ExactCount"  # ExactCount | All
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    capacity: tuple[tuple[str, Fraction], ...] = ()  # capacity.requests, sorted by name


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    alternatives: tuple[SubRequest, ...]  # one for ``exactly``; firstAvailable in order


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: tuple[str, ...]  # empty: every request of the claim
    match_attribute: str = ""
    distinct_attribute: str = ""


@dataclass(frozen=True, slots=True)
class Allocation:
    results: tuple[DeviceResult, ...]
    terms: tuple[NodeSelectorTerm, ...] | None = None  # None: every node

    def reaches(self, node: str, labels: Mapping[str, str]) -> bool:
        return self.terms is None or match_node_terms(self.terms, node, labels)

    def named_nodes(self) -> frozenset[str] | None:
        """The nodes it reaches when its selector names them (``matchFields metadata.name In``,
        as a node-local device's allocation does), else None (read it node by node)."""
        if self.terms is None:
            return None
        out: set[str] = set()
        for term in self.terms:
            if term.match_expressions or len(term.match_fields) != 1:
                return None
            (req,) = term.match_fields
            if req.operator != "In":
                return None
            out.update(req.values)
        return frozenset(out)


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str
    resource_version: str
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()
    allocation: Allocation | None = None
    reserved_for: tuple[str, ...] = ()  # pod uids
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: ``metadata.finalizers`` at ``resource_version``; ``None``: not known (not parsed)
    finalizers: tuple[str, ...] | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


# --- parsing ----------------------------------------------------------------------------------


def _node_terms(raw: object, path: str) -> tuple[NodeSelectorTerm, ...] | None:
    if raw is None:
        return None
    aff = node_affinity({"requiredDuringSchedulingIgnoredDuringExecution": raw}, path)
    return aff.required if aff is not None else None


def _attributes(raw: Mapping[str, object], driver: str, path: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, value in raw.items():
        p = f"{path}[{name}]"
        v = entry(value, p)
        domain, _, short = name.rpartition("/")
        parsed: AttributeValue
        if "int" in v and isinstance(v["int"], int) and not isinstance(v["int"], bool):
            parsed = v["int"]
        elif "bool" in v and isinstance(v["bool"], bool):
            parsed = v["bool"]
        elif "string" in v and isinstance(v["string"], str):
            parsed = v["string"]
        elif "version" in v and isinstance(v["version"], str):
            try:
                parsed = SemVer.parse(v["version"])
            except ValueError as bad:
                raise FieldError(p, str(bad)) from None
        else:
            raise FieldError(p, "must hold exactly one of int, bool, string, version")
        out.setdefault(domain or driver, {})[short] = parsed
    return out


def _capacity(raw: Mapping[str, object], driver: str, path: str) -> dict[str, dict[str, Quantity]]:
    out: dict[str, dict[str, Quantity]] = {}
    for name, value in raw.items():
        p = f"{path}[{name}]"
        try:
            q = Quantity.parse(entry(value, p).get("value"))
        except QuantityError as bad:
            raise FieldError(f"{p}.value", str(bad)) from None
        domain, _, short = name.rpartition("/")
        out.setdefault(domain or driver, {})[short] = q
    return out


def _taints(raw: Sequence[object], path: str) -> tuple[Taint, ...]:
    out = []
    for i, item in enumerate(raw):
        e = entry(item, f"{path}[{i}]")
        out.append(
            Taint(
                text(e, "key", path),
                text(e, "value", path),
                text(e, "effect", path, "NoSchedule"),
            )
        )
    return tuple(out)


def _selection(e: Mapping[str, object], path: str) -> NodeSelection:
    return NodeSelection(
        node_name=text(e, "nodeName", path),
        terms=_node_terms(e.get("nodeSelector"), f"{path}.nodeSelector"),
        all_nodes=e.get("allNodes") is True,
    )


def parse_resource_slice(obj: Mapping[str, Any]) -> ResourceSlice | DraObjectError:
    name = str(obj.get("metadata", {}).get("name", "?")) if isinstance(obj, Mapping) else "?"
    try:
        meta = mapping(obj, "metadata", "")
        spec = mapping(obj, "spec", "")
        driver = text(spec, "driver", "spec")
        pool = mapping(spec, "pool", "spec")
        pool_name = text(pool, "name", "spec.pool")
        if not driver or not pool_name:
            raise FieldError("spec", "driver and pool.name must be set")
        per_device = spec.get("perDeviceNodeSelection") is True
        selection = None if per_device else _selection(spec, "spec")
        devices = []
        for i, item in enumerate(sequence(spec, "devices", "spec")):
            p = f"spec.devices[{i}]"
            d = entry(item, p)
            dev_name = text(d, "name", p)
            if not dev_name:
                raise FieldError(f"{p}.name", "must be set")
            capacity = mapping(d, "capacity", p)
            devices.append(
                Device(
                    id=DeviceId(driver, pool_name, dev_name),
                    attributes=_attributes(mapping(d, "attributes", p), driver, f"{p}.attributes"),
                    capacity=_capacity(capacity, driver, f"{p}.capacity"),
                    taints=_taints(sequence(d, "taints", p), f"{p}.taints"),
                    selection=_selection(d, p) if per_device else None,
                    allow_multiple=d.get("allowMultipleAllocations") is True,
                    consumable=parse_capacities(capacity, f"{p}.capacity"),
                )
            )
        return ResourceSlice(
            name=text(meta, "name", "metadata"),
            driver=driver,
            pool=pool_name,
            generation=integer(pool, "generation", "spec.pool") or 0,
            slice_count=integer(pool, "resourceSliceCount", "spec.pool") or 1,
            selection=selection,
            devices=tuple(devices),
            raw=obj,
        )
    except FieldError as bad:
        return DraObjectError(
            "ResourceSlice", name, f"{bad.field}: {bad.message}", node=_slice_node(obj)
        )


def _slice_node(obj: object) -> str:
    """The node a slice names, read as far as it can be ("*": every node; "" unknown)."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if not isinstance(spec, Mapping):
        return ""
    node = spec.get("nodeName")
    if isinstance(node, str):
        return node
    return "*" if spec.get("allNodes") is True else ""


def _selectors(raw: Sequence[object], path: str) -> tuple[str, ...]:
    out = []
    for i, item in enumerate(raw):
        e = entry(item, f"{path}[{i}]")
        cel = mapping(e, "cel", f"{path}[{i}]")
        expr = text(cel, "expression", f"{path}[{i}].cel")
        if not expr:
            raise FieldError(f"{path}[{i}].cel.expression", "must be set")
        out.append(expr)
    return tuple(out)


def _configs(raw: Sequence[object], path: str) -> tuple[Mapping[str, Any], ...]:
    return tuple(entry(item, f"{path}[{i}]") for i, item in enumerate(raw))


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass | DraObjectError:
    name = str(obj.get("metadata", {}).get("name", "?")) if isinstance(obj, Mapping) else "?"
    try:
        meta = mapping(obj, "metadata", "")
        spec = mapping(obj, "spec", "")
        return DeviceClass(
            name=text(meta, "name", "metadata"),
            selectors=_selectors(sequence(spec, "selectors", "spec"), "spec.selectors"),
            config=_configs(sequence(spec, "config", "spec"), "spec.config"),
            extended_resource_name=text(spec, "extendedResourceName", "spec"),
            raw=obj,
        )
    except FieldError as bad:
        return DraObjectError("DeviceClass", name, f"{bad.field}: {bad.message}")


_TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")


def parse_device_taint_rule(obj: Mapping[str, Any]) -> DeviceTaintRule | DraObjectError:
    """A ``DeviceTaintRule``; an effect the API does not define, or a taint without a key, is
    refused naming the field and the value (the API server validates these too: this guards
    against a newer API, and keeps a bad rule from tainting anything)."""
    name = str(obj.get("metadata", {}).get("name", "?")) if isinstance(obj, Mapping) else "?"
    try:
        meta = mapping(obj, "metadata", "")
        spec = mapping(obj, "spec", "")
        raw = mapping(spec, "taint", "spec")
        taint = Taint(
            text(raw, "key", "spec.taint"),
            text(raw, "value", "spec.taint"),
            text(raw, "effect", "spec.taint"),
        )
        if not taint.key:
            raise FieldError("spec.taint.key", "must be set")
        if taint.effect not in _TAINT_EFFECTS:
            raise FieldError(
                "spec.taint.effect",
                f"{taint.effect!r} is not one of {', '.join(_TAINT_EFFECTS)}",
            )
        selector = spec.get("deviceSelector")
        chosen = mapping(spec, "deviceSelector", "spec")
        return DeviceTaintRule(
            name=text(meta, "name", "metadata"),
            taint=taint,
            driver=text(chosen, "driver", "spec.deviceSelector"),
            pool=text(chosen, "pool", "spec.deviceSelector"),
            device=text(chosen, "device", "spec.deviceSelector"),
            selects=selector is not None,
        )
    except FieldError as bad:
        return DraObjectError("DeviceTaintRule", name, f"{bad.field}: {bad.message}")


def _tolerations(raw: Sequence[object], path: str) -> tuple[Toleration, ...]:
    out = []
    for i, item in enumerate(raw):
        e = entry(item, f"{path}[{i}]")
        out.append(
            Toleration(
                text(e, "key", path),
                text(e, "operator", path, "Equal"),
                text(e, "value", path),
                text(e, "effect", path),
            )
        )
    return tuple(out)


def _sub(e: Mapping[str, object], name: str, path: str) -> SubRequest:
    mode = text(e, "allocationMode", path, "ExactCount")
    if mode not in ("ExactCount", "All"):
        raise FieldError(f"{path}.allocationMode", f"unknown mode {mode!r}")
    count = integer(e, "count", path)
    if count is None:
        count = 1
    if mode == "ExactCount" and count < 1:
        raise FieldError(f"{path}.count", "must be at least 1")
    class_name = text(e, "deviceClassName", path)
    if not class_name:
        raise FieldError(f"{path}.deviceClassName", "must be set")
    return SubRequest(
        name=name,
        class_name=class_name,
        selectors=_selectors(sequence(e, "selectors", path), f"{path}.selectors"),
        mode=mode,
        count=count,
        admin_access=e.get("adminAccess") is True,
        tolerations=_tolerations(sequence(e, "tolerations", path), f"{path}.tolerations"),
        capacity=parse_requests(e, path),
    )


def _requests(devices: Mapping[str, object]) -> tuple[DeviceRequest, ...]:
    out = []
    for i, item in enumerate(sequence(devices, "requests", "spec.devices")):
        p = f"spec.devices.requests[{i}]"
        e = entry(item, p)
        name = text(e, "name", p)
        if not name:
            raise FieldError(f"{p}.name", "must be set")
        if "exactly" in e:
            alts: tuple[SubRequest, ...] = (_sub(mapping(e, "exactly", p), name, f"{p}.exactly"),)
        else:
            subs = sequence(e, "firstAvailable", p)
            alts = tuple(
                _sub(
                    entry(s, f"{p}.firstAvailable[{j}]"),
                    f"{name}/{text(entry(s, p), 'name', p)}",
                    f"{p}.firstAvailable[{j}]",
                )
                for j, s in enumerate(subs)
            )
            if not alts:
                raise FieldError(p, "must have exactly or firstAvailable")
        out.append(DeviceRequest(name, alts))
    return tuple(out)


def _constraints(devices: Mapping[str, object]) -> tuple[Constraint, ...]:
    out = []
    for i, item in enumerate(sequence(devices, "constraints", "spec.devices")):
        p = f"spec.devices.constraints[{i}]"
        e = entry(item, p)
        out.append(
            Constraint(
                requests=tuple(str(r) for r in sequence(e, "requests", p)),
                match_attribute=text(e, "matchAttribute", p),
                distinct_attribute=text(e, "distinctAttribute", p),
            )
        )
    return tuple(out)


def _allocation(status: Mapping[str, object]) -> Allocation | None:
    raw = status.get("allocation")
    if raw is None:
        return None
    alloc = entry(raw, "status.allocation")
    devices = mapping(alloc, "devices", "status.allocation")
    results = []
    for i, item in enumerate(sequence(devices, "results", "status.allocation.devices")):
        p = f"status.allocation.devices.results[{i}]"
        e = entry(item, p)
        consumed = mapping(e, "consumedCapacity", p)
        results.append(
            DeviceResult(
                request=text(e, "request", p),
                device=DeviceId(text(e, "driver", p), text(e, "pool", p), text(e, "device", p)),
                admin_access=e.get("adminAccess") is True,
                consumed=tuple(sorted(parse_amounts(consumed, f"{p}.consumedCapacity").items())),
                share_id=text(e, "shareID", p),
            )
        )
    terms = _node_terms(alloc.get("nodeSelector"), "status.allocation.nodeSelector")
    return Allocation(tuple(results), terms)


def parse_resource_claim(obj: Mapping[str, Any]) -> ResourceClaim | DraObjectError:
    meta0 = obj.get("metadata", {}) if isinstance(obj, Mapping) else {}
    key = f"{meta0.get('namespace', '?')}/{meta0.get('name', '?')}"
    try:
        meta = mapping(obj, "metadata", "")
        spec = mapping(obj, "spec", "")
        status = mapping(obj, "status", "")
        devices = mapping(spec, "devices", "spec")
        reserved = tuple(
            text(entry(r, "status.reservedFor"), "uid", "status.reservedFor")
            for r in sequence(status, "reservedFor", "status")
        )
        return ResourceClaim(
            namespace=text(meta, "namespace", "metadata") or "default",
            name=text(meta, "name", "metadata"),
            uid=text(meta, "uid", "metadata"),
            resource_version=text(meta, "resourceVersion", "metadata"),
            requests=_requests(devices),
            constraints=_constraints(devices),
            config=_configs(sequence(devices, "config", "spec.devices"), "spec.devices.config"),
            allocation=_allocation(status),
            reserved_for=reserved,
            raw=obj,
            finalizers=tuple(str(f) for f in sequence(meta, "finalizers", "metadata")),
        )
    except FieldError as bad:
        return DraObjectError("ResourceClaim", key, f"{bad.field}: {bad.message}")
