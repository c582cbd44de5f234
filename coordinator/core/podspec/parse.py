"""What a pod asks of the scheduler, read purely from the Pod object the API server returns.

:func:`parse_pod` turns a Pod (a ``dict`` decoded from JSON or YAML) into a :class:`PodRequest`,
or, when anything is wrong with it, into a :class:`PodSpecError` naming the bad field. It never
raises: a malformed pod must be reported on that pod and harm nothing else.

Resource requests follow Kubernetes: per container, a resource with a limit but no request
requests its limit; the pod requests ``max(sum(containers) + sidecars, max(init containers))``
plus ``spec.overhead``. CPU is counted in millicores, everything else in whole units (bytes,
devices), rounded up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from common import podkeys
from common.quantity import QuantityError, parse_quantity, to_int, to_milli
from coordinator.core.framework.status import Reason, Status
from coordinator.core.podspec.migprofiles import MIG_RESOURCE_PREFIX, is_known_mig_profile
from coordinator.core.podspec.selectors import (
    LABEL_OPERATORS,
    NODE_OPERATORS,
    LabelSelector,
    NodeSelectorTerm,
    Requirement,
)

__all__ = [
    "GPU_RESOURCE",
    "MAX_GPUS_PER_POD",
    "AffinityTerm",
    "GangSpec",
    "HostPort",
    "NodeAffinity",
    "PodRequest",
    "PodSpecError",
    "SpreadConstraint",
    "Taint",
    "Toleration",
    "WeightedAffinityTerm",
    "WeightedNodeTerm",
    "host_ports",
    "parse_affinity_terms",
    "parse_pod",
    "parse_pod_lenient_requests",
    "pod_requests",
]

GPU_RESOURCE: Final = podkeys.GPU_RESOURCE
# The largest GPU nodes hold 16 GPUs; 64 leaves room for future boxes and still catches typos
# like "800" or "1e6".
MAX_GPUS_PER_POD: Final = 64
MAX_MIG_PER_POD: Final = 64
_MAX_GANG: Final = 10_000  # the gang manager's bound too (coordinator.core.gangs.identity)
_MiB: Final = 2**20


class _Bad(Exception):
    """Internal: raised while parsing, turned into a :class:`PodSpecError` at the boundary."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


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
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # empty with operator Exists: tolerates every taint
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty: every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    required: tuple[NodeSelectorTerm, ...] | None = None  # None: no requirement
    preferred: tuple[WeightedNodeTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class WeightedNodeTerm:
    weight: int
    term: NodeSelectorTerm


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """One pod (anti-)affinity term, with ``matchLabelKeys``/``mismatchLabelKeys`` folded into
    the selector and the namespace rule resolved as far as it can be without namespace labels."""

    selector: LabelSelector | None  # None selects no pod
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None  # None: only ``namespaces``; empty: all namespaces
    topology_key: str

    def matches_namespace(self, namespace: str, ns_labels: Mapping[str, str] | None) -> bool:
        if namespace in self.namespaces:
            return True
        if self.namespace_selector is None:
            return False
        if self.namespace_selector.is_empty:
            return True
        return self.namespace_selector.matches(ns_labels or {})

    def matches_pod(
        self, namespace: str, labels: Mapping[str, str], ns_labels: Mapping[str, str] | None
    ) -> bool:
        if self.selector is None:
            return False
        return self.matches_namespace(namespace, ns_labels) and self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class WeightedAffinityTerm:
    weight: int
    term: AffinityTerm


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    selector: LabelSelector | None
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"  # Honor | Ignore
    node_taints_policy: str = "Ignore"  # Honor | Ignore


@dataclass(frozen=True, slots=True)
class HostPort:
    """A container port bound on the node (``hostPort``)."""

    port: int
    protocol: str = "TCP"
    ip: str = "0.0.0.0"

    def conflicts(self, other: HostPort) -> bool:
        """Same port and protocol, on the same address or where either listens on all."""
        if self.port != other.port or self.protocol != other.protocol:
            return False
        wildcard = ("0.0.0.0", "::", "")
        return self.ip == other.ip or self.ip in wildcard or other.ip in wildcard


@dataclass(frozen=True, slots=True)
class GangSpec:
    name: str
    min_member: int | None  # None: from a scheduler-plugins PodGroup object
    timeout_s: float | None
    source: str  # "topos" | "kubenexus" | "x-k8s"


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
    gpus: int = 0  # whole GPUs (nvidia.com/gpu), 0 when the pod asks for MIG instances instead
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
    gang: GangSpec | None = None
    placement: str | None = None
    preferred_domain: str | None = None
    node_name: str = ""  # spec.nodeName, set when already bound
    host_ports: tuple[HostPort, ...] = ()  # ports the pod binds on its node

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def mig_count(self) -> int:
        return sum(n for _, n in self.mig)

    @property
    def wants_devices(self) -> bool:
        return self.gpus > 0 or bool(self.mig)

    @property
    def has_affinity_terms(self) -> bool:
        return bool(
            self.pod_affinity
            or self.pod_anti_affinity
            or self.pod_affinity_preferred
            or self.pod_anti_affinity_preferred
        )


# --- small typed accessors ---------------------------------------------------------------------


def _map(parent: Mapping[str, object], key: str, path: str) -> Mapping[str, object]:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _Bad(f"{path}.{key}", "must be a mapping")
    return value


def _list(parent: Mapping[str, object], key: str, path: str) -> Sequence[object]:
    value = parent.get(key)
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise _Bad(f"{path}.{key}", "must be a list")
    return value


def _str(parent: Mapping[str, object], key: str, path: str, default: str = "") -> str:
    value = parent.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise _Bad(f"{path}.{key}", "must be a string")
    return value


def _int(parent: Mapping[str, object], key: str, path: str) -> int | None:
    value = parent.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{path}.{key}", "must be an integer")
    return value


def _entry(item: object, path: str) -> Mapping[str, object]:
    if not isinstance(item, Mapping):
        raise _Bad(path, "must be a mapping")
    return item


def _str_map(parent: Mapping[str, object], key: str, path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in _map(parent, key, path).items():
        if not isinstance(v, str):
            raise _Bad(f"{path}.{key}.{k}", "must be a string")
        out[str(k)] = v
    return out


# --- resources ---------------------------------------------------------------------------------


def _amount(name: str, raw: object, path: str) -> int:
    try:
        q = parse_quantity(raw)
    except QuantityError as exc:
        raise _Bad(path, str(exc)) from None
    if name == "cpu":
        return to_milli(q)
    if (name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX)) and q.denominator != 1:
        raise _Bad(path, f"{name} must be a whole number, got {raw!r}")
    return to_int(q)


def _container_requests(container: Mapping[str, object], path: str) -> dict[str, int]:
    resources = _map(container, "resources", path)
    rpath = f"{path}.resources"
    requests = {
        str(k): _amount(str(k), v, f"{rpath}.requests.{k}")
        for k, v in _map(resources, "requests", rpath).items()
    }
    limits = {
        str(k): _amount(str(k), v, f"{rpath}.limits.{k}")
        for k, v in _map(resources, "limits", rpath).items()
    }
    for name, limit in limits.items():
        requests.setdefault(name, limit)
    for name in (GPU_RESOURCE,):
        if name in requests and name in limits and requests[name] != limits[name]:
            raise _Bad(f"{rpath}.requests.{name}", f"must equal its limit ({limits[name]})")
    return requests


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + amount


def pod_requests(spec: Mapping[str, object]) -> dict[str, int]:
    """The pod's effective requests (kube's rule for init containers, sidecars and overhead).

    Raises the internal parse error; callers use :func:`parse_pod`.
    """
    total: dict[str, int] = {}
    containers = _list(spec, "containers", "spec")
    for i, c in enumerate(containers):
        _add(
            total, _container_requests(_entry(c, f"spec.containers[{i}]"), f"spec.containers[{i}]")
        )
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for i, c in enumerate(_list(spec, "initContainers", "spec")):
        path = f"spec.initContainers[{i}]"
        entry = _entry(c, path)
        req = _container_requests(entry, path)
        if entry.get("restartPolicy") == "Always":  # a sidecar: runs beside the app containers
            _add(sidecars, req)
            candidate = dict(sidecars)
        else:
            candidate = dict(sidecars)
            _add(candidate, req)
        for name, amount in candidate.items():
            init_max[name] = max(init_max.get(name, 0), amount)
    _add(total, sidecars)
    for name, amount in init_max.items():
        total[name] = max(total.get(name, 0), amount)
    for name, raw in _map(spec, "overhead", "spec").items():
        _add(total, {str(name): _amount(str(name), raw, f"spec.overhead.{name}")})
    return {name: amount for name, amount in total.items() if amount > 0}


# --- selectors and affinity ---------------------------------------------------------------------


def _requirements(
    items: Sequence[object], path: str, operators: frozenset[str]
) -> tuple[Requirement, ...]:
    out: list[Requirement] = []
    for i, item in enumerate(items):
        p = f"{path}[{i}]"
        e = _entry(item, p)
        key = _str(e, "key", p)
        op = _str(e, "operator", p)
        if not key:
            raise _Bad(f"{p}.key", "must not be empty")
        if op not in operators:
            raise _Bad(
                f"{p}.operator",
                f"unknown operator {op!r} (expected {', '.join(sorted(operators))})",
            )
        values = tuple(str(v) for v in _list(e, "values", p))
        if op in ("In", "NotIn") and not values:
            raise _Bad(f"{p}.values", f"must not be empty for {op}")
        if op in ("Exists", "DoesNotExist") and values:
            raise _Bad(f"{p}.values", f"must be empty for {op}")
        if op in ("Gt", "Lt"):
            if len(values) != 1:
                raise _Bad(f"{p}.values", f"{op} takes exactly one value")
            try:
                int(values[0])
            except ValueError:
                raise _Bad(f"{p}.values", f"{op} takes an integer, got {values[0]!r}") from None
        out.append(Requirement(key, op, values))
    return tuple(out)


def _label_selector(raw: object, path: str) -> LabelSelector | None:
    if raw is None:
        return None
    e = _entry(raw, path)
    match_labels = tuple(sorted(_str_map(e, "matchLabels", path).items()))
    exprs = _requirements(
        _list(e, "matchExpressions", path), f"{path}.matchExpressions", LABEL_OPERATORS
    )
    return LabelSelector(match_labels, exprs)


def _node_term(raw: object, path: str) -> NodeSelectorTerm:
    e = _entry(raw, path)
    exprs = _requirements(
        _list(e, "matchExpressions", path), f"{path}.matchExpressions", NODE_OPERATORS
    )
    fields = _requirements(_list(e, "matchFields", path), f"{path}.matchFields", NODE_OPERATORS)
    for i, req in enumerate(fields):
        if req.key != "metadata.name":
            raise _Bad(f"{path}.matchFields[{i}].key", "only metadata.name is supported")
        if req.operator not in ("In", "NotIn") or len(req.values) != 1:
            raise _Bad(f"{path}.matchFields[{i}]", "metadata.name takes In or NotIn with one value")
    return NodeSelectorTerm(exprs, fields)


def _node_affinity(raw: Mapping[str, object], path: str) -> NodeAffinity | None:
    if not raw:
        return None
    required: tuple[NodeSelectorTerm, ...] | None = None
    req = raw.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req is not None:
        rpath = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
        terms = _list(_entry(req, rpath), "nodeSelectorTerms", rpath)
        if not terms:
            raise _Bad(f"{rpath}.nodeSelectorTerms", "must not be empty")
        required = tuple(
            _node_term(t, f"{rpath}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms)
        )
    preferred: list[WeightedNodeTerm] = []
    ppath = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    for i, item in enumerate(_list(raw, "preferredDuringSchedulingIgnoredDuringExecution", path)):
        p = f"{ppath}[{i}]"
        e = _entry(item, p)
        weight = _weight(e, p)
        preferred.append(
            WeightedNodeTerm(weight, _node_term(e.get("preference"), f"{p}.preference"))
        )
    return NodeAffinity(required, tuple(preferred))


def _weight(e: Mapping[str, object], path: str) -> int:
    weight = _int(e, "weight", path)
    if weight is None or not 1 <= weight <= 100:
        raise _Bad(f"{path}.weight", "must be an integer from 1 to 100")
    return weight


def _affinity_term(
    raw: object, path: str, namespace: str, labels: Mapping[str, str]
) -> AffinityTerm:
    e = _entry(raw, path)
    topology_key = _str(e, "topologyKey", path)
    if not topology_key:
        raise _Bad(f"{path}.topologyKey", "must not be empty")
    selector = _label_selector(e.get("labelSelector"), f"{path}.labelSelector")
    extra: list[Requirement] = []
    for key in _list(e, "matchLabelKeys", path):
        if isinstance(key, str) and key in labels:
            extra.append(Requirement(key, "In", (labels[key],)))
    for key in _list(e, "mismatchLabelKeys", path):
        if isinstance(key, str) and key in labels:
            extra.append(Requirement(key, "NotIn", (labels[key],)))
    if selector is not None:
        selector = selector.with_extra(extra)
    namespaces = frozenset(str(n) for n in _list(e, "namespaces", path))
    ns_selector = _label_selector(e.get("namespaceSelector"), f"{path}.namespaceSelector")
    if not namespaces and ns_selector is None:
        namespaces = frozenset({namespace})
    return AffinityTerm(selector, namespaces, ns_selector, topology_key)


def parse_affinity_terms(
    raw: Mapping[str, object], path: str, namespace: str, labels: Mapping[str, str]
) -> tuple[tuple[AffinityTerm, ...], tuple[WeightedAffinityTerm, ...]]:
    """Required and preferred terms of one ``podAffinity``/``podAntiAffinity`` block."""
    req = tuple(
        _affinity_term(
            t, f"{path}.requiredDuringSchedulingIgnoredDuringExecution[{i}]", namespace, labels
        )
        for i, t in enumerate(_list(raw, "requiredDuringSchedulingIgnoredDuringExecution", path))
    )
    pref: list[WeightedAffinityTerm] = []
    for i, item in enumerate(_list(raw, "preferredDuringSchedulingIgnoredDuringExecution", path)):
        p = f"{path}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        e = _entry(item, p)
        pref.append(
            WeightedAffinityTerm(
                _weight(e, p),
                _affinity_term(e.get("podAffinityTerm"), f"{p}.podAffinityTerm", namespace, labels),
            )
        )
    return req, tuple(pref)


def _tolerations(spec: Mapping[str, object]) -> tuple[Toleration, ...]:
    out: list[Toleration] = []
    for i, item in enumerate(_list(spec, "tolerations", "spec")):
        p = f"spec.tolerations[{i}]"
        e = _entry(item, p)
        key = _str(e, "key", p)
        op = _str(e, "operator", p, "Equal")
        value = _str(e, "value", p)
        effect = _str(e, "effect", p)
        if op not in ("Equal", "Exists"):
            raise _Bad(f"{p}.operator", f"unknown operator {op!r} (expected Equal or Exists)")
        if op == "Exists" and value:
            raise _Bad(f"{p}.value", "must be empty when operator is Exists")
        if not key and op != "Exists":
            raise _Bad(f"{p}.operator", "must be Exists when key is empty")
        if effect not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise _Bad(f"{p}.effect", f"unknown effect {effect!r}")
        out.append(Toleration(key, op, value, effect))
    return tuple(out)


def _spread(spec: Mapping[str, object], labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    out: list[SpreadConstraint] = []
    for i, item in enumerate(_list(spec, "topologySpreadConstraints", "spec")):
        p = f"spec.topologySpreadConstraints[{i}]"
        e = _entry(item, p)
        max_skew = _int(e, "maxSkew", p)
        if max_skew is None or max_skew < 1:
            raise _Bad(f"{p}.maxSkew", "must be an integer ≥ 1")
        key = _str(e, "topologyKey", p)
        if not key:
            raise _Bad(f"{p}.topologyKey", "must not be empty")
        when = _str(e, "whenUnsatisfiable", p)
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise _Bad(
                f"{p}.whenUnsatisfiable",
                f"unknown value {when!r} (expected DoNotSchedule or ScheduleAnyway)",
            )
        min_domains = _int(e, "minDomains", p)
        if min_domains is not None and (min_domains < 1 or when != "DoNotSchedule"):
            raise _Bad(f"{p}.minDomains", "must be ≥ 1 and needs whenUnsatisfiable: DoNotSchedule")
        nap = _str(e, "nodeAffinityPolicy", p, "Honor")
        ntp = _str(e, "nodeTaintsPolicy", p, "Ignore")
        for name, value in (("nodeAffinityPolicy", nap), ("nodeTaintsPolicy", ntp)):
            if value not in ("Honor", "Ignore"):
                raise _Bad(f"{p}.{name}", f"unknown value {value!r} (expected Honor or Ignore)")
        selector = _label_selector(e.get("labelSelector"), f"{p}.labelSelector")
        extra = [
            Requirement(k, "In", (labels[k],))
            for k in _list(e, "matchLabelKeys", p)
            if isinstance(k, str) and k in labels
        ]
        if selector is not None:
            selector = selector.with_extra(extra)
        out.append(SpreadConstraint(max_skew, key, when, selector, min_domains, nap, ntp))
    return tuple(out)


# --- annotations ---------------------------------------------------------------------------------


def _key(key: podkeys.Key, values: Mapping[str, str]) -> str | None:
    value, conflict = podkeys.lookup(key, values)
    if conflict is not None:
        raise _Bad(f"metadata.{key.where}s[{key.canonical}]", conflict.message)
    return value


def _choice(key: podkeys.Key, values: Mapping[str, str], allowed: Sequence[str]) -> str | None:
    value = _key(key, values)
    if value is None:
        return None
    if value not in allowed:
        raise _Bad(
            f"metadata.{key.where}s[{key.canonical}]",
            f"unknown value {value!r} (expected {' | '.join(allowed)})",
        )
    return value


def _duration_s(text: str, path: str) -> float:
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    raw = text.strip()
    for suffix in ("ms", "s", "m", "h"):
        if raw.endswith(suffix):
            number, factor = raw[: -len(suffix)], units[suffix]
            break
    else:
        number, factor = raw, 1.0
    try:
        value = float(number) * factor
    except ValueError:
        raise _Bad(path, f"malformed duration {text!r} (e.g. 300, 90s, 5m, 1h)") from None
    if not 0 < value <= 7 * 86400 or value != value:
        raise _Bad(path, f"duration {text!r} must be positive and at most 7 days")
    return value


def _gang(labels: Mapping[str, str], annotations: Mapping[str, str]) -> GangSpec | None:
    name = _key(podkeys.GANG, labels)
    x_k8s = labels.get(podkeys.POD_GROUP_X_K8S.canonical)
    min_text = _key(podkeys.GANG_MIN, labels)
    timeout_text = _key(podkeys.GANG_TIMEOUT, annotations)
    if name is None and x_k8s is None:
        if min_text is not None:
            raise _Bad(f"metadata.labels[{podkeys.GANG_MIN.canonical}]", "set without a gang name")
        return None
    if name is not None and x_k8s is not None and name != x_k8s:
        raise _Bad(
            f"metadata.labels[{podkeys.GANG.canonical}]",
            f"contradictory labels: gang {name!r} and "
            f"{podkeys.POD_GROUP_X_K8S.canonical}={x_k8s!r}",
        )
    min_member: int | None = None
    if min_text is not None:
        try:
            min_member = int(min_text)
        except ValueError:
            min_member = -1
        if not 1 <= min_member <= _MAX_GANG:
            raise _Bad(
                f"metadata.labels[{podkeys.GANG_MIN.canonical}]",
                f"must be an integer from 1 to {_MAX_GANG}, got {min_text!r}",
            )
    timeout = (
        None
        if timeout_text is None
        else _duration_s(timeout_text, f"metadata.annotations[{podkeys.GANG_TIMEOUT.canonical}]")
    )
    if name is not None:
        kubenexus = any(a in labels for a in podkeys.GANG.aliases)
        source = "kubenexus" if kubenexus and podkeys.GANG.canonical not in labels else "topos"
        if min_member is None and x_k8s is None:
            raise _Bad(
                f"metadata.labels[{podkeys.GANG_MIN.canonical}]", "a gang needs its minimum size"
            )
        return GangSpec(name, min_member, timeout, source)
    assert x_k8s is not None
    return GangSpec(x_k8s, min_member, timeout, "x-k8s")


def _numa(annotations: Mapping[str, str]) -> tuple[str | None, frozenset[str]]:
    policy = _choice(podkeys.NUMA_POLICY, annotations, podkeys.NUMA_POLICY_VALUES)
    resources_text = _key(podkeys.NUMA_RESOURCES, annotations)
    if resources_text is None:
        if policy is None:
            return None, frozenset()
        return policy, frozenset(podkeys.NUMA_RESOURCE_VALUES)
    path = f"metadata.annotations[{podkeys.NUMA_RESOURCES.canonical}]"
    names = [n.strip() for n in resources_text.split(",") if n.strip()]
    if not names:
        raise _Bad(path, "names no resource")
    for n in names:
        if n not in podkeys.NUMA_RESOURCE_VALUES:
            raise _Bad(
                path, f"unknown resource {n!r} (expected {', '.join(podkeys.NUMA_RESOURCE_VALUES)})"
            )
    return policy or "best-effort", frozenset(names)


def _gpu_memory_mib(annotations: Mapping[str, str]) -> int | None:
    text = _key(podkeys.GPU_MEMORY_MIN, annotations)
    if text is None:
        return None
    path = f"metadata.annotations[{podkeys.GPU_MEMORY_MIN.canonical}]"
    try:
        # A bare number is MiB, as nvidia-smi and the node labels count GPU memory.
        mib = int(text) if text.isdigit() else to_int(parse_quantity(text) / _MiB)
    except QuantityError as exc:
        raise _Bad(path, str(exc)) from None
    if mib <= 0 or mib > 16 * 2**20:  # 16 TiB per GPU is no GPU we know of
        raise _Bad(path, f"{text!r} is not a plausible per-GPU memory size")
    return mib


def _mig(
    requests: dict[str, int], annotations: Mapping[str, str]
) -> tuple[tuple[tuple[str, int], ...], int, bool]:
    """MIG demand from ``nvidia.com/mig-<profile>`` resources or ``topos.io/mig-profile``.

    Returns (profile counts, whole GPUs left, from_annotation).
    """
    gpus = requests.get(GPU_RESOURCE, 0)
    found: dict[str, int] = {}
    for name, amount in requests.items():
        if name.startswith(MIG_RESOURCE_PREFIX):
            profile = name[len(MIG_RESOURCE_PREFIX) :]
            if not is_known_mig_profile(profile):
                raise _Bad(
                    f"spec.containers[*].resources.limits[{name}]",
                    f"unknown MIG profile {profile!r}",
                )
            found[profile] = amount
    annotated = _key(podkeys.MIG_PROFILE, annotations)
    from_annotation = False
    if annotated is not None:
        path = f"metadata.annotations[{podkeys.MIG_PROFILE.canonical}]"
        if not is_known_mig_profile(annotated):
            raise _Bad(path, f"unknown MIG profile {annotated!r}")
        if found and set(found) != {annotated}:
            raise _Bad(
                path,
                f"contradicts the requested MIG resources ({', '.join(sorted(found))})",
            )
        if not found:
            # Single-strategy nodes advertise MIG devices as nvidia.com/gpu: N of them is N
            # instances of the annotated profile.
            found[annotated] = max(gpus, 1)
            gpus = 0
            from_annotation = True
    total = sum(found.values())
    if total > MAX_MIG_PER_POD:
        raise _Bad(
            "spec.containers[*].resources", f"{total} MIG instances is more than {MAX_MIG_PER_POD}"
        )
    return tuple(sorted(found.items())), gpus, from_annotation


def parse_pod(obj: object) -> PodRequest | PodSpecError:
    """Read a Pod object (as the API server returns it) into a :class:`PodRequest`."""
    meta: Mapping[str, object] = {}
    try:
        if not isinstance(obj, Mapping):
            raise _Bad("pod", "must be a mapping")
        meta = _map(obj, "metadata", "")
        spec = _map(obj, "spec", "")
        return _parse(meta, spec)
    except _Bad as bad:
        ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else "default"
        name = meta.get("name") if isinstance(meta.get("name"), str) else "?"
        return PodSpecError(f"{ns}/{name}", bad.field.lstrip("."), bad.message)


def _parse(meta: Mapping[str, object], spec: Mapping[str, object]) -> PodRequest:
    namespace = _str(meta, "namespace", "metadata") or "default"
    name = _str(meta, "name", "metadata")
    labels = _str_map(meta, "labels", "metadata")
    annotations = _str_map(meta, "annotations", "metadata")
    if not _list(spec, "containers", "spec"):
        raise _Bad("spec.containers", "must name at least one container")
    requests = pod_requests(spec)
    mig, gpus, mig_from_annotation = _mig(requests, annotations)
    if gpus > MAX_GPUS_PER_POD:
        raise _Bad(
            "spec.containers[*].resources.limits[nvidia.com/gpu]",
            f"{gpus} GPUs is more than any node holds (at most {MAX_GPUS_PER_POD})",
        )
    locality = _choice(podkeys.GPU_LOCALITY, annotations, podkeys.GPU_LOCALITY_VALUES) or "any"
    numa_policy, numa_resources = _numa(annotations)
    priority = _int(spec, "priority", "spec")
    affinity = _map(spec, "affinity", "spec")
    node_affinity = _node_affinity(
        _map(affinity, "nodeAffinity", "spec.affinity"), "spec.affinity.nodeAffinity"
    )
    pa, pa_pref = parse_affinity_terms(
        _map(affinity, "podAffinity", "spec.affinity"),
        "spec.affinity.podAffinity",
        namespace,
        labels,
    )
    paa, paa_pref = parse_affinity_terms(
        _map(affinity, "podAntiAffinity", "spec.affinity"),
        "spec.affinity.podAntiAffinity",
        namespace,
        labels,
    )
    return PodRequest(
        namespace=namespace,
        name=name,
        uid=_str(meta, "uid", "metadata"),
        labels=labels,
        priority=priority or 0,
        priority_class_name=_str(spec, "priorityClassName", "spec"),
        preemption_policy=_str(spec, "preemptionPolicy", "spec", "PreemptLowerPriority"),
        scheduler_name=_str(spec, "schedulerName", "spec", "default-scheduler"),
        requests=requests,
        gpus=gpus,
        mig=mig,
        mig_from_annotation=mig_from_annotation,
        gpu_memory_min_mib=_gpu_memory_mib(annotations),
        gpu_locality=locality,
        numa_policy=numa_policy,
        numa_resources=numa_resources,
        node_selector=tuple(sorted(_str_map(spec, "nodeSelector", "spec").items())),
        node_affinity=node_affinity,
        pod_affinity=pa,
        pod_affinity_preferred=pa_pref,
        pod_anti_affinity=paa,
        pod_anti_affinity_preferred=paa_pref,
        tolerations=_tolerations(spec),
        spread=_spread(spec, labels),
        gang=_gang(labels, annotations),
        placement=_choice(podkeys.PLACEMENT, annotations, podkeys.PLACEMENT_VALUES),
        preferred_domain=_key(podkeys.PREFERRED_DOMAIN, annotations),
        node_name=_str(spec, "nodeName", "spec"),
        host_ports=host_ports(spec),
    )


def host_ports(spec: Mapping[str, object]) -> tuple[HostPort, ...]:
    """``hostPort`` entries of the app containers and sidecars (restartable init containers)."""
    out: list[HostPort] = []
    groups = [("containers", _list(spec, "containers", "spec"))]
    groups.append(("initContainers", _list(spec, "initContainers", "spec")))
    for group, containers in groups:
        for i, c in enumerate(containers):
            path = f"spec.{group}[{i}]"
            entry = _entry(c, path)
            if group == "initContainers" and entry.get("restartPolicy") != "Always":
                continue
            for j, port in enumerate(_list(entry, "ports", path)):
                p = _entry(port, f"{path}.ports[{j}]")
                number = _int(p, "hostPort", f"{path}.ports[{j}]")
                if not number:
                    continue
                if not 0 < number < 65536:
                    raise _Bad(f"{path}.ports[{j}].hostPort", f"{number} is not a port number")
                out.append(
                    HostPort(
                        number,
                        _str(p, "protocol", f"{path}.ports[{j}]", "TCP") or "TCP",
                        _str(p, "hostIP", f"{path}.ports[{j}]", "0.0.0.0") or "0.0.0.0",
                    )
                )
    return tuple(out)


def parse_pod_lenient_requests(spec: Mapping[str, object]) -> dict[str, int]:
    """Requests of a pod already running (bound by anyone): malformed parts count as zero."""
    try:
        return pod_requests(spec)
    except _Bad:
        return {}
