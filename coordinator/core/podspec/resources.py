"""What a pod requests of its node, by Kubernetes' rule — the one copy of that rule.

Per container, a resource with a limit but no request requests its limit. The pod requests, per
resource, the larger of the app containers plus the restartable init containers (sidecars, which
run beside them) and the peak of the init phase (each init container plus the sidecars started
before it) — or, for cpu, memory and hugepages, the pod-level ``spec.resources.requests`` where
it names them (PodLevelResources) —, plus ``spec.overhead``. CPU is counted in millicores,
everything else in whole units (bytes, devices), rounded up; resources that come to zero are left
out.

kube-scheduler's resource *scoring* (NodeResourcesFit's LeastAllocated and MostAllocated) counts a
pod's cpu and memory by the same rule with one change (:class:`NonZero`): a container that writes
no cpu request counts 100m, one that writes no memory request 200 MiB (``DefaultMilliCPURequest``,
``DefaultMemoryRequest``; a request written as 0 stays 0), so pods that request nothing still
spread. Filtering counts the real requests.

:func:`pod_demand` is strict (a waiting pod: any malformed part is an error naming the field);
:func:`held_demand` is lenient (a pod already bound holds what can be read of it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

from common.podkeys import GPU_RESOURCE
from common.quantity import QuantityError, parse_quantity, to_int, to_milli
from coordinator.core.podspec.fields import FieldError, mapping, sequence
from coordinator.core.podspec.migprofiles import MIG_RESOURCE_PREFIX

__all__ = [
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "DEFAULT_NONZERO",
    "Demand",
    "NonZero",
    "held_demand",
    "held_requests",
    "nonzero_of",
    "pod_demand",
    "quantity",
]

_MILLI_RESOURCES: Final = frozenset({"cpu"})
#: What pod-level ``spec.resources.requests`` sets for the whole pod (PodLevelResources, beta and
#: on since 1.34), in place of its containers' sum; other names there are not read.
_POD_LEVEL: Final = frozenset({"cpu", "memory"})
_HUGEPAGES: Final = "hugepages-"
#: What kube-scheduler's scoring counts for a container that requests no cpu / no memory
#: (``pkg/scheduler/util``: ``DefaultMilliCPURequest``, ``DefaultMemoryRequest``).
DEFAULT_MILLI_CPU_REQUEST: Final = 100
DEFAULT_MEMORY_REQUEST: Final = 200 * 2**20
#: Parsed text quantities, keyed by (in millis?, text): pods and nodes repeat a handful of
#: values ("1", "4Gi", "110"), and parsing through ``Fraction`` is most of a pod's translation.
_PARSED: dict[tuple[bool, str], int] = {}
_PARSED_MAX: Final = 4096


def quantity(resource: str, value: object) -> int:
    """A quantity in the unit of ``resource`` (millicores for cpu); raises ``QuantityError``."""
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


def _amount(name: str, raw: object, path: str) -> int:
    try:
        if name != GPU_RESOURCE and not name.startswith(MIG_RESOURCE_PREFIX):
            return quantity(name, raw)
        if type(raw) is str and raw.isdigit():
            return int(raw)
        q = parse_quantity(raw)
    except QuantityError as exc:
        raise FieldError(path, str(exc)) from None
    if q.denominator != 1:
        raise FieldError(path, f"{name} must be a whole number, got {raw!r}")
    return int(q)


class _Reader:
    """Reads the parts of a pod spec strictly (errors raise) or leniently (bad parts are empty)."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict

    def part(self, parent: Mapping[str, object], key: str, path: str) -> Mapping[str, object]:
        try:
            return mapping(parent, key, path)
        except FieldError:
            if self.strict:
                raise
            return {}

    def items(self, parent: Mapping[str, object], key: str, path: str) -> Sequence[object]:
        try:
            return sequence(parent, key, path)
        except FieldError:
            if self.strict:
                raise
            return ()

    def amounts(
        self, raw: Mapping[str, object], path: str, zeros: dict[str, str] | None = None
    ) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, value in raw.items():
            try:
                out[str(name)] = amount = _amount(str(name), value, f"{path}.{name}")
            except FieldError:
                if self.strict:
                    raise
                continue
            if amount == 0 and zeros is not None:
                zeros.setdefault(str(name), f"{path}[{name}]")
        return out

    def container(
        self, raw: object, path: str, zeros: dict[str, str] | None = None
    ) -> tuple[dict[str, int], bool]:
        """The container's requests, and whether it is a sidecar (restartable init container)."""
        if not isinstance(raw, Mapping):
            if self.strict:
                raise FieldError(path, "must be a mapping")
            return {}, False
        resources = self.part(raw, "resources", path)
        rpath = f"{path}.resources"
        requests = self.amounts(self.part(resources, "requests", rpath), f"{rpath}.requests", zeros)
        limits = self.amounts(self.part(resources, "limits", rpath), f"{rpath}.limits", zeros)
        for name, limit in limits.items():
            requests.setdefault(name, limit)
        gpu_limit = limits.get(GPU_RESOURCE)
        if self.strict and gpu_limit is not None and requests[GPU_RESOURCE] != gpu_limit:
            raise FieldError(
                f"{rpath}.requests.{GPU_RESOURCE}", f"must equal its limit ({gpu_limit})"
            )
        return requests, raw.get("restartPolicy") == "Always"

    def pod(self, spec: Mapping[str, object], zeros: dict[str, str] | None = None) -> Demand:
        total: dict[str, int] = {}
        # Beside the requests, kube's NonMissingContainerRequests: each container without a cpu
        # (memory) request counts the default, summed by the same rule; a request written as 0
        # is not missing. ``named``: cpu/memory that some container writes.
        cpu = memory = 0
        named_cpu = named_memory = False
        for i, c in enumerate(self.items(spec, "containers", "spec")):
            req = self.container(c, f"spec.containers[{i}]", zeros)[0]
            _add(total, req)
            cpu += req.get("cpu", DEFAULT_MILLI_CPU_REQUEST)
            memory += req.get("memory", DEFAULT_MEMORY_REQUEST)
            named_cpu = named_cpu or "cpu" in req
            named_memory = named_memory or "memory" in req
        inits = self.items(spec, "initContainers", "spec")
        if inits:
            sidecars: dict[str, int] = {}
            init_peak: dict[str, int] = {}
            side_cpu = side_memory = peak_cpu = peak_memory = 0
            for i, c in enumerate(inits):
                req, sidecar = self.container(c, f"spec.initContainers[{i}]", zeros)
                c_cpu = req.get("cpu", DEFAULT_MILLI_CPU_REQUEST)
                c_memory = req.get("memory", DEFAULT_MEMORY_REQUEST)
                named_cpu = named_cpu or "cpu" in req
                named_memory = named_memory or "memory" in req
                if sidecar:  # runs beside the app containers from now on
                    _add(sidecars, req)
                    running = sidecars
                    side_cpu += c_cpu
                    side_memory += c_memory
                    run_cpu, run_memory = side_cpu, side_memory
                else:  # runs alone, beside the sidecars started before it
                    running = dict(sidecars)
                    _add(running, req)
                    run_cpu, run_memory = side_cpu + c_cpu, side_memory + c_memory
                for name, amount in running.items():
                    init_peak[name] = max(init_peak.get(name, 0), amount)
                peak_cpu = max(peak_cpu, run_cpu)
                peak_memory = max(peak_memory, run_memory)
            _add(total, sidecars)
            for name, amount in init_peak.items():
                total[name] = max(total.get(name, 0), amount)
            cpu = max(cpu + side_cpu, peak_cpu)
            memory = max(memory + side_memory, peak_memory)
        level: dict[str, int] = {}
        pod_level = self.part(spec, "resources", "spec")
        if pod_level:
            for name, amount in self.amounts(
                self.part(pod_level, "requests", "spec.resources"), "spec.resources.requests"
            ).items():
                if name in _POD_LEVEL or name.startswith(_HUGEPAGES):
                    level[name] = total[name] = amount
        overhead = self.part(spec, "overhead", "spec")
        o_cpu = o_memory = 0
        if overhead:
            extra = self.amounts(overhead, "spec.overhead")
            _add(total, extra)
            o_cpu, o_memory = extra.get("cpu", 0), extra.get("memory", 0)
            named_cpu = named_cpu or "cpu" in extra
            named_memory = named_memory or "memory" in extra
        scored = held = NonZero(
            level.get("cpu", cpu) + o_cpu, level.get("memory", memory) + o_memory
        )
        if level:
            # A node's NonZeroRequested (kube's PodInfo.CalculateResource) fills in a default
            # only for what neither the pod level nor any container (nor the overhead) names.
            held = NonZero(
                total.get("cpu", 0) if "cpu" in level or named_cpu else cpu,
                total.get("memory", 0) if "memory" in level or named_memory else memory,
            )
        requests = {name: amount for name, amount in total.items() if amount > 0}
        return Demand(requests, scored, held)


class NonZero(NamedTuple):
    """A pod's cpu (millicores) and memory (bytes) as kube-scheduler's resource scoring counts
    them: a container without a request for one counts its default."""

    cpu: int
    memory: int


class Demand(NamedTuple):
    """What a pod asks of its node."""

    #: Its effective requests (the module's rule), resources that come to zero left out.
    requests: dict[str, int]
    #: What NodeResourcesFit's scoring counts for it as the pod to place.
    scored: NonZero
    #: What it adds to its node's ``nonzero_requested`` once there (kube's
    #: ``NodeInfo.NonZeroRequested``): ``scored`` but where pod-level requests are set and leave
    #: out cpu or memory that a container names — then the containers' real sum.
    held: NonZero


#: A pod of one container that requests neither cpu nor memory.
DEFAULT_NONZERO: Final = NonZero(DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST)


def nonzero_of(requests: Mapping[str, int]) -> NonZero:
    """``requests`` of a pod known only by its sums, counted as one container's."""
    return NonZero(
        requests.get("cpu") or DEFAULT_MILLI_CPU_REQUEST,
        requests.get("memory") or DEFAULT_MEMORY_REQUEST,
    )


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + amount


_STRICT: Final = _Reader(strict=True)
_LENIENT: Final = _Reader(strict=False)


def pod_demand(spec: Mapping[str, object], zeros: dict[str, str] | None = None) -> Demand:
    """What a pod waiting to be placed asks for; raises :class:`FieldError`.

    Resources written as 0 ask for nothing and are left out of its requests, as kube-scheduler
    counts them; ``zeros`` (when given) gains each of them with the first field writing it: to a
    sharing device plugin a share of 0 is a statement (:mod:`~coordinator.core.podspec.sharing`)."""
    return _STRICT.pod(spec, zeros)


def held_demand(spec: object) -> Demand:
    """What a pod already bound (by anyone) holds: a malformed part counts as zero, and only it."""
    return _LENIENT.pod(spec if isinstance(spec, Mapping) else {})


def held_requests(spec: object) -> dict[str, int]:
    """:func:`held_demand`'s requests."""
    return held_demand(spec).requests
