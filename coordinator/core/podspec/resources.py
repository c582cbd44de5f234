"""What a pod requests of its node, by Kubernetes' rule — the one copy of that rule.

Per container, a resource with a limit but no request requests its limit. The pod requests, per
resource, the larger of the app containers plus the restartable init containers (sidecars, which
run beside them) and the peak of the init phase (each init container plus the sidecars started
before it) — or, for cpu, memory and hugepages, the pod-level ``spec.resources.requests`` where
it names them (PodLevelResources) —, plus ``spec.overhead``. CPU is counted in millicores,
everything else in whole units (bytes, devices), rounded up; resources that come to zero are left
out.

:func:`pod_requests` is strict (a waiting pod: any malformed part is an error naming the field);
:func:`held_requests` is lenient (a pod already bound holds what can be read of it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from common.podkeys import GPU_RESOURCE
from common.quantity import QuantityError, parse_quantity, to_int, to_milli
from coordinator.core.podspec.fields import FieldError, mapping, sequence
from coordinator.core.podspec.migprofiles import MIG_RESOURCE_PREFIX

__all__ = ["held_requests", "pod_requests", "quantity"]

_MILLI_RESOURCES: Final = frozenset({"cpu"})
#: What pod-level ``spec.resources.requests`` sets for the whole pod (PodLevelResources, beta and
#: on since 1.34), in place of its containers' sum; other names there are not read.
_POD_LEVEL: Final = frozenset({"cpu", "memory"})
_HUGEPAGES: Final = "hugepages-"
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

    def pod(
        self, spec: Mapping[str, object], zeros: dict[str, str] | None = None
    ) -> dict[str, int]:
        total: dict[str, int] = {}
        for i, c in enumerate(self.items(spec, "containers", "spec")):
            _add(total, self.container(c, f"spec.containers[{i}]", zeros)[0])
        sidecars: dict[str, int] = {}
        init_peak: dict[str, int] = {}
        for i, c in enumerate(self.items(spec, "initContainers", "spec")):
            req, sidecar = self.container(c, f"spec.initContainers[{i}]", zeros)
            if sidecar:  # runs beside the app containers from now on
                _add(sidecars, req)
                running = dict(sidecars)
            else:  # runs alone, beside the sidecars started before it
                running = dict(sidecars)
                _add(running, req)
            for name, amount in running.items():
                init_peak[name] = max(init_peak.get(name, 0), amount)
        _add(total, sidecars)
        for name, amount in init_peak.items():
            total[name] = max(total.get(name, 0), amount)
        pod_level = self.part(spec, "resources", "spec")
        for name, amount in self.amounts(
            self.part(pod_level, "requests", "spec.resources"), "spec.resources.requests"
        ).items():
            if name in _POD_LEVEL or name.startswith(_HUGEPAGES):
                total[name] = amount
        _add(total, self.amounts(self.part(spec, "overhead", "spec"), "spec.overhead"))
        return {name: amount for name, amount in total.items() if amount > 0}


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + amount


_STRICT: Final = _Reader(strict=True)
_LENIENT: Final = _Reader(strict=False)


def pod_requests(spec: Mapping[str, object], zeros: dict[str, str] | None = None) -> dict[str, int]:
    """The effective requests of a pod waiting to be placed; raises :class:`FieldError`.

    Resources written as 0 ask for nothing and are left out, as kube-scheduler counts them;
    ``zeros`` (when given) gains each of them with the first field writing it: to a sharing
    device plugin a share of 0 is a statement (:mod:`~coordinator.core.podspec.sharing`)."""
    return _STRICT.pod(spec, zeros)


def held_requests(spec: object) -> dict[str, int]:
    """What a pod already bound (by anyone) holds: a malformed part counts as zero, and only it."""
    return _LENIENT.pod(spec) if isinstance(spec, Mapping) else {}
