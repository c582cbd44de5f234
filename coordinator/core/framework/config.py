"""Scheduler configuration: which plugins run and how much each score counts.

Loaded from YAML (a file or the ``scheduling`` key of the coordinator's ConfigMap)::

    weights:
      topology_fitness: 5
      numa_fit: 3
    packing: binpack          # or spread
    percentage_of_nodes_to_score: 100
    disabled_plugins: [GpuAvailability]

Unknown keys, negative weights and unknown modes are rejected with a :class:`ConfigError` naming
the key. The reasons behind each default are in ``docs/scheduling.md``.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import yaml

__all__ = ["ConfigError", "SchedulerConfig", "ScoreWeights", "load_config"]


class ConfigError(ValueError):
    """A scheduler configuration that cannot be used, with the key that is wrong."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreWeights:
    """Multipliers of each Score plugin's 0–100 score."""

    #: GPU set quality inside the node: worst link class, intact NVLink groups left.
    topology_fitness: int = 5
    #: Pinned resources on one NUMA node (or as few as possible).
    numa_fit: int = 3
    #: GPU bin-packing (or spreading, see ``packing``) across nodes.
    bin_packing: int = 3
    #: Keep GPU nodes' GPUs for GPU work: CPU-only pods prefer nodes without free GPUs.
    gpu_availability: int = 2
    #: kube-scheduler's NodeResourcesFit (LeastAllocated over cpu and memory).
    node_resources: int = 1
    #: kube-scheduler's defaults for the Kubernetes preferences:
    node_affinity: int = 2
    taint_toleration: int = 3
    inter_pod_affinity: int = 2
    topology_spread: int = 2
    #: Network-domain utilisation (the domains plugin, when registered).
    domain_utilisation: int = 2

    def for_plugin(self, plugin: str) -> int:
        return getattr(self, PLUGIN_WEIGHT.get(plugin, ""), 1)


PLUGIN_WEIGHT: Final = {
    "GpuTopology": "topology_fitness",
    "DynamicResources": "topology_fitness",
    "NumaTopology": "numa_fit",
    "GpuPacking": "bin_packing",
    "GpuAvailability": "gpu_availability",
    "NodeResourcesFit": "node_resources",
    "NodeAffinity": "node_affinity",
    "TaintToleration": "taint_toleration",
    "InterPodAffinity": "inter_pod_affinity",
    "PodTopologySpread": "topology_spread",
    "DomainUtilisation": "domain_utilisation",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    weights: ScoreWeights = field(default_factory=ScoreWeights)
    #: ``binpack`` fills partly used GPU nodes first (keeps whole nodes for big jobs);
    #: ``spread`` prefers the emptiest node.
    packing: str = "binpack"
    #: Stop filtering once this share of nodes was found feasible (kube-scheduler's option).
    #: 100 evaluates every node (best placements); 0 uses kube's adaptive rule.
    percentage_of_nodes_to_score: int = 100
    #: Plugin names removed from the default profile.
    disabled_plugins: frozenset[str] = frozenset()
    #: Extra plugin names (registered by other packages) added to the profile, in order.
    enabled_plugins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.packing not in ("binpack", "spread"):
            raise ConfigError(
                f"packing: unknown mode {self.packing!r} (expected binpack or spread)"
            )
        if not 0 <= self.percentage_of_nodes_to_score <= 100:
            raise ConfigError("percentage_of_nodes_to_score: must be from 0 to 100")
        for f in dataclasses.fields(self.weights):
            value = getattr(self.weights, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
                raise ConfigError(f"weights.{f.name}: must be an integer from 0 to 100")


def load_config(source: str | Mapping[str, object] | None) -> SchedulerConfig:
    """A config from YAML text or an already decoded mapping (``None``/empty: the defaults)."""
    if source is None:
        return SchedulerConfig()
    if isinstance(source, str):
        try:
            data = yaml.safe_load(source)
        except yaml.YAMLError as exc:
            raise ConfigError(f"scheduler config is not valid YAML: {exc}") from None
    else:
        data = source
    if data is None:
        return SchedulerConfig()
    if not isinstance(data, Mapping):
        raise ConfigError("scheduler config must be a mapping")
    known = {
        "weights",
        "packing",
        "percentage_of_nodes_to_score",
        "disabled_plugins",
        "enabled_plugins",
    }
    for key in data:
        if key not in known:
            raise ConfigError(f"{key}: unknown key{_hint(str(key), known)}")
    weights_raw = data.get("weights") or {}
    if not isinstance(weights_raw, Mapping):
        raise ConfigError("weights: must be a mapping")
    names = {f.name for f in dataclasses.fields(ScoreWeights)}
    for key in weights_raw:
        if key not in names:
            raise ConfigError(f"weights.{key}: unknown weight{_hint(str(key), names)}")
    try:
        weights = ScoreWeights(**{str(k): v for k, v in weights_raw.items()})
    except TypeError as exc:
        raise ConfigError(f"weights: {exc}") from None
    kwargs: dict[str, object] = {"weights": weights}
    if "packing" in data:
        kwargs["packing"] = data["packing"]
    if "percentage_of_nodes_to_score" in data:
        pct = data["percentage_of_nodes_to_score"]
        if isinstance(pct, bool) or not isinstance(pct, int):
            raise ConfigError("percentage_of_nodes_to_score: must be an integer")
        kwargs["percentage_of_nodes_to_score"] = pct
    for key in ("disabled_plugins", "enabled_plugins"):
        if key in data:
            value = data[key]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{key}: must be a list of plugin names")
            kwargs[key] = frozenset(value) if key == "disabled_plugins" else tuple(value)
    return SchedulerConfig(**kwargs)  # type: ignore[arg-type]


def _hint(key: str, known: set[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f" — did you mean {close[0]!r}?"
    return f" (expected one of {', '.join(sorted(known))})"
