"""An AgentPool's spec, read and checked.

:func:`parse_pool` turns the object as the API server returns it into a :class:`PoolSpec`, or
raises :class:`PoolProblem` with a message naming the field: negative counts, ``count: 0`` with
a MIG profile, an unknown MIG profile or GPU type, ``maxReplicas`` below ``minReplicas``. A GPU
type is known when some node carries it (``neuronetes.io/gpu-type``) or it is a model in
:data:`KNOWN_GPU_TYPES` (a pool may wait for nodes that are not there yet).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from common.quantity import QuantityError, parse_quantity
from coordinator.core.gangs.identity import GangProblem, gang_of_agent_pool
from coordinator.core.podspec.migprofiles import is_known_mig_profile

__all__ = [
    "KNOWN_GPU_TYPES",
    "LOCALITIES",
    "PCIE_BANDWIDTH",
    "Autoscaling",
    "GpuAsk",
    "MetricsSource",
    "PoolProblem",
    "PoolSpec",
    "parse_pool",
    "scheduling_json",
]

#: NVIDIA models as ``neuronetes.io/gpu-type`` spells them (the agent's labeler).
KNOWN_GPU_TYPES: Final = frozenset(
    {
        "A2", "A10", "A10G", "A16", "A30", "A40", "A100", "A800", "B100", "B200", "GB200",
        "GH200", "H20", "H100", "H200", "H800", "L4", "L20", "L40", "L40S", "P4", "P40", "P100",
        "T4", "V100", "RTX-3090", "RTX-4090", "RTX-5090", "RTX-A6000", "RTX-6000",
    }
)  # fmt: skip
LOCALITIES: Final = ("same-node", "same-socket", "nvlink", "any")
#: PCIe 5.0 x16, one direction: a ``minBandwidth`` above it can only be NVLink.
PCIE_BANDWIDTH: Final = 64 * 10**9
DEFAULT_MAX_REPLICAS: Final = 10


class PoolProblem(ValueError):
    """The pool cannot be served as written; the message names the field."""


@dataclass(frozen=True, slots=True)
class GpuAsk:
    count: int = 0
    type: str | None = None
    memory: str | None = None  # a quantity, as topos.io/gpu-memory-min reads it
    locality: str | None = None  # topos.io/gpu-locality


@dataclass(frozen=True, slots=True)
class MetricsSource:
    source: str = "pods"  # pods | prometheus
    port: int = 8000
    path: str = "/metrics"
    url: str | None = None  # template: {podIP} {port} {path} {pod} {namespace} {pool}
    prometheus_url: str | None = None
    queue_tokens_query: str | None = None
    tokens_per_second_query: str | None = None
    timeout_s: float = 2.0


@dataclass(frozen=True, slots=True)
class Autoscaling:
    ttft_s: float = 2.0
    model_load_s: float = 0.0
    cooldown_s: float = 60.0
    tokens_per_second_per_replica: float | None = None
    tokens_per_request: float = 256.0
    metrics: MetricsSource = field(default_factory=MetricsSource)


@dataclass(frozen=True, slots=True)
class PoolSpec:
    namespace: str
    name: str
    uid: str
    model: str | None
    replicas: int | None
    min_replicas: int
    max_replicas: int
    gpu: GpuAsk
    mig_profile: str | None
    gang_min: int | None
    gang_timeout_s: int | None
    priority: int | None
    preemption: bool | None
    autoscaling: Autoscaling | None
    scheduling: Mapping[str, Any]
    template: Mapping[str, Any] | None
    unsupported: tuple[str, ...] = ()
    """Fields the pool sets that Topos does not act on, each with why (condition
    ``SpecSupported=False``); the pool is served without them."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def wants_priority_class(self) -> bool:
        return self.priority is not None or self.preemption is not None

    def base_replicas(self) -> int:
        """What the pool runs without the autoscaler: ``spec.replicas``, else ``minReplicas``."""
        return self.replicas if self.replicas is not None else self.min_replicas


def _obj(value: object, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PoolProblem(f"{path} must be an object")
    return value


def _count(value: object, path: str, default: int | None) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise PoolProblem(f"{path}: {value!r} is not a whole number")
    if value < 0:
        raise PoolProblem(f"{path}: {value} is negative")
    return value


def _number(value: object, path: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PoolProblem(f"{path}: {value!r} is not a non-negative number")
    return float(value)


def _bandwidth(value: object) -> Fraction:
    """Bytes per second; a bare number is GB/s."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Fraction(value) * 10**9
    if isinstance(value, str) and value.strip().replace(".", "", 1).isdigit():
        return Fraction(value.strip()) * 10**9
    try:
        return parse_quantity(value)
    except QuantityError as exc:
        raise PoolProblem(f"spec.gpuRequirements.topology.minBandwidth: {exc}") from None


def _gpu(spec: Mapping[str, Any], node_types: Collection[str]) -> GpuAsk:
    raw = _obj(spec.get("gpuRequirements"), "spec.gpuRequirements")
    count = _count(raw.get("count"), "spec.gpuRequirements.count", None)
    gpu_type = raw.get("type")
    if gpu_type is not None:
        if not isinstance(gpu_type, str) or not gpu_type:
            raise PoolProblem("spec.gpuRequirements.type must be a non-empty string")
        if gpu_type not in KNOWN_GPU_TYPES and gpu_type not in node_types:
            seen = ", ".join(sorted(node_types)) or "none"
            raise PoolProblem(
                f"spec.gpuRequirements.type: unknown GPU type {gpu_type!r} "
                f"(no node has it — nodes have: {seen} — and it is no GPU model Topos knows)"
            )
    memory = raw.get("memory")
    if memory is not None:
        try:
            if parse_quantity(memory) <= 0:
                raise QuantityError("must be positive")
        except QuantityError as exc:
            raise PoolProblem(f"spec.gpuRequirements.memory: {exc}") from None
    topology = _obj(raw.get("topology"), "spec.gpuRequirements.topology")
    locality = topology.get("locality")
    if locality is not None and locality not in LOCALITIES:
        raise PoolProblem(
            f"spec.gpuRequirements.topology.locality: {locality!r} is not one of "
            + ", ".join(LOCALITIES)
        )
    bandwidth = topology.get("minBandwidth")
    if bandwidth is not None and _bandwidth(bandwidth) > PCIE_BANDWIDTH:
        locality = "nvlink"
    default = 1 if (raw or spec.get("migProfile")) else 0
    return GpuAsk(
        count=default if count is None else count,
        type=gpu_type,
        memory=None if memory is None else str(memory),
        locality=locality,
    )


def _metrics(raw: Mapping[str, Any]) -> MetricsSource:
    source = raw.get("source", "pods")
    if source not in ("pods", "prometheus"):
        raise PoolProblem(f"spec.autoscaling.metrics.source: {source!r} is not pods or prometheus")
    port = _count(raw.get("port"), "spec.autoscaling.metrics.port", 8000)
    return MetricsSource(
        source=source,
        port=port or 8000,
        path=str(raw.get("path") or "/metrics"),
        url=raw.get("url"),
        prometheus_url=raw.get("prometheusUrl"),
        queue_tokens_query=raw.get("queueTokensQuery"),
        tokens_per_second_query=raw.get("tokensPerSecondQuery"),
        timeout_s=_number(raw.get("timeoutSeconds"), "spec.autoscaling.metrics.timeoutSeconds", 2),
    )


def _autoscaling(spec: Mapping[str, Any]) -> Autoscaling | None:
    raw = _obj(spec.get("autoscaling"), "spec.autoscaling")
    if not raw or raw.get("enabled") is False:
        return None
    slo = _obj(raw.get("slo"), "spec.autoscaling.slo")
    ttft_ms = _number(slo.get("ttftMs"), "spec.autoscaling.slo.ttftMs", 2000.0)
    if ttft_ms <= 0:
        raise PoolProblem("spec.autoscaling.slo.ttftMs must be positive")
    tps = raw.get("tokensPerSecondPerReplica")
    return Autoscaling(
        ttft_s=ttft_ms / 1000,
        model_load_s=_number(raw.get("modelLoadTimeSeconds"), "modelLoadTimeSeconds", 0.0),
        cooldown_s=_number(raw.get("cooldownSeconds"), "spec.autoscaling.cooldownSeconds", 60.0),
        tokens_per_second_per_replica=(
            None if tps is None else _number(tps, "tokensPerSecondPerReplica", 0.0) or None
        ),
        tokens_per_request=_number(raw.get("tokensPerRequest"), "tokensPerRequest", 256.0),
        metrics=_metrics(_obj(raw.get("metrics"), "spec.autoscaling.metrics")),
    )


#: Fields the CRD accepts (the guide writes them) that Topos does not act on, and why.
UNSUPPORTED: Final = (
    (
        ("prewarmPercent",),
        "Topos keeps no warm pool: the pool runs spec.replicas pods (or what the autoscaler "
        "asks), none of them spare",
    ),
    (
        ("scheduling", "fastScheduling"),
        "a scheduler-wide setting, not a pool's: set scheduling.fastScheduling in the "
        "coordinator's configuration",
    ),
)


def _unsupported(spec: Mapping[str, Any]) -> tuple[str, ...]:
    out = []
    for path, why in UNSUPPORTED:
        value: Any = spec
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is not None:
            out.append(f"spec.{'.'.join(path)} is set ({json.dumps(value)}) but ignored: {why}")
    return tuple(out)


def scheduling_json(spec: Mapping[str, Any]) -> str:
    """``spec.scheduling`` as compact JSON (annotation ``neuronetes.io/scheduling``)."""
    return json.dumps(spec.get("scheduling") or {}, separators=(",", ":"), sort_keys=True)


def parse_pool(pool: Mapping[str, Any], node_types: Collection[str] = ()) -> PoolSpec:
    """The pool's spec; ``node_types``: the ``neuronetes.io/gpu-type`` values nodes carry."""
    meta = _obj(pool.get("metadata"), "metadata")
    spec = _obj(pool.get("spec"), "spec")
    replicas = _count(spec.get("replicas"), "spec.replicas", None)
    low = _count(spec.get("minReplicas"), "spec.minReplicas", 1) or 0
    high = _count(spec.get("maxReplicas"), "spec.maxReplicas", None)
    autoscaling = _autoscaling(spec)
    if high is None:
        high = max(low, DEFAULT_MAX_REPLICAS if autoscaling is not None else low)
    if high < low:
        raise PoolProblem(f"spec.maxReplicas ({high}) is below spec.minReplicas ({low})")
    gpu = _gpu(spec, node_types)
    mig = spec.get("migProfile")
    if mig is not None:
        if not isinstance(mig, str) or not is_known_mig_profile(mig):
            raise PoolProblem(f"spec.migProfile: unknown MIG profile {mig!r}")
        if gpu.count == 0:
            raise PoolProblem(
                f"spec.gpuRequirements.count is 0 but spec.migProfile asks for {mig!r}: "
                "a MIG instance is a GPU; ask for at least 1"
            )
    scheduling = _obj(spec.get("scheduling"), "spec.scheduling")
    gang = gang_of_agent_pool(pool)
    if isinstance(gang, GangProblem):
        raise PoolProblem(f"spec.scheduling.gangScheduling: {gang.message}")
    gang_cfg = _obj(scheduling.get("gangScheduling"), "spec.scheduling.gangScheduling")
    timeout = _count(gang_cfg.get("timeoutSeconds"), "gangScheduling.timeoutSeconds", None)
    priority = scheduling.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise PoolProblem(f"spec.scheduling.priority: {priority!r} is not a whole number")
    if priority is not None and abs(priority) > 1_000_000_000:
        raise PoolProblem(f"spec.scheduling.priority: {priority} is beyond ±1000000000")
    preemption = _obj(scheduling.get("preemption"), "spec.scheduling.preemption")
    enabled = preemption.get("enabled") if preemption else None
    template = spec.get("template")
    if template is not None:
        _check_template(template)
    model = spec.get("model")
    return PoolSpec(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        model=model if isinstance(model, str) and model else None,
        replicas=replicas,
        min_replicas=low,
        max_replicas=high,
        gpu=gpu,
        mig_profile=mig,
        gang_min=None if gang is None else gang.min_member,
        gang_timeout_s=timeout,
        priority=priority,
        preemption=None if not preemption else enabled is not False,
        autoscaling=autoscaling,
        scheduling=scheduling,
        template=template,
        unsupported=_unsupported(spec),
    )


def _check_template(template: object) -> None:
    body = _obj(template, "spec.template")
    pod_spec = _obj(body.get("spec"), "spec.template.spec")
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise PoolProblem("spec.template.spec.containers must list at least one container")
    if not all(isinstance(c, Mapping) and c.get("name") for c in containers):
        raise PoolProblem("spec.template.spec.containers: every container needs a name")
