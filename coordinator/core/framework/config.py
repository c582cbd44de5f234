"""Scheduler configuration: which plugins run and how much each score counts.

Loaded from YAML (a file or the ``scheduling`` key of the coordinator's ConfigMap)::

    weights:
      topology_fitness: 5
      numa_fit: 3
    packing: binpack          # or spread
    percentageOfNodesToScore: 0      # kube's adaptive rule (the default); 100: every node
    fastScheduling: {enabled: true, maxNodesToScore: 50}
    disabled_plugins: [GpuAvailability]
    topologyConstraints: {maxNodesPerLeaf: 4, maxGPUsPerLeaf: 32}
    scoringWeights: {resourceAvailability: 0.4, topologyAlignment: 0.3}   # the seeds' factors

The seeds' whole objects (a KubeSchedulerConfiguration profile, a topology-scheduler
``SchedulerConfig``) are read by :mod:`.seedforms`. Unknown keys, negative weights and unknown
modes are rejected with a :class:`ConfigError` naming the key. The reasons behind each default
are in ``docs/scheduling.md``.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Final

import yaml

from common.configdoc import first_non_finite, load_yaml, yaml_number
from coordinator.core.framework import seedforms
from coordinator.core.framework.config_errors import ConfigError, hint
from coordinator.core.framework.customscorers import CustomScorer, read_custom_scorers
from coordinator.core.framework.prices import PriceTable, read_prices
from coordinator.core.framework.spreadargs import SYSTEM_SPREAD, SpreadDefaults

__all__ = [
    "ConfigError",
    "FastScheduling",
    "SchedulerConfig",
    "ScoreWeights",
    "TopologyConstraints",
    "load_config",
]


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
    #: Network-domain utilisation: GPU use of the node's leaf (DomainUtilisation).
    domain_utilisation: int = 2
    #: Recent bind failures and gang recoveries in the node's leaf (HistoricalPerformance).
    historical_performance: int = 1
    #: AgentPool pods only (see ``agentPools``): the pod's model cached on the node, the
    #: node's price (``prices``), a region the pool prefers (``carbonAware.preferredRegions``).
    model_cache: int = 4
    cost_efficiency: int = 3
    preferred_region: int = 2
    #: Growth of the node's GPU fragmentation against the pod shapes seen (GpuFragmentation,
    #: pods sharing a GPU; docs/sharing.md).
    gpu_fragmentation: int = 25

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
    "GroupSpread": "inter_pod_affinity",  # a soft anti-affinity among a group's pods
    "PodTopologySpread": "topology_spread",
    "DomainUtilisation": "domain_utilisation",
    "HistoricalPerformance": "historical_performance",
    "ModelCache": "model_cache",
    "CostEfficiency": "cost_efficiency",
    "PreferredRegion": "preferred_region",
    "GpuFragmentation": "gpu_fragmentation",
}


#: Every plugin the built-in registry has (``core/registry.py`` checks it against its own list).
BUILT_IN_PLUGINS: Final = frozenset(
    {*PLUGIN_WEIGHT, "NodeHealth", "NodeUnschedulable", "NodePorts", "PoolPlacement"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyConstraints:
    """Seed 003/004's ``topologyConstraints``: the most nodes and GPUs one gang (or placed
    workload) may take in a single leaf; ``None``: no limit."""

    max_nodes_per_leaf: int | None = None
    max_gpus_per_leaf: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FastScheduling:
    """NeuroNetes' fast path: score at most ``max_nodes_to_score`` feasible nodes (an absolute
    count, unlike the percentage), whatever the cluster's size."""

    enabled: bool = False
    max_nodes_to_score: int = 50

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError("fastScheduling.enabled: must be true or false")
        n = self.max_nodes_to_score
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(
                "fastScheduling.maxNodesToScore: must be a whole number of at least 1"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    weights: ScoreWeights = field(default_factory=ScoreWeights)
    #: ``binpack`` fills partly used GPU nodes first (keeps whole nodes for big jobs);
    #: ``spread`` prefers the emptiest node.
    packing: str = "binpack"
    #: Stop filtering once this share of nodes was found feasible (kube-scheduler's option).
    #: 0 (the default) is kube's adaptive rule; 100 evaluates and scores every node.
    percentage_of_nodes_to_score: int = 0
    #: An absolute cap on the feasible nodes scored, when enabled (on top of the percentage).
    fast_scheduling: FastScheduling = field(default_factory=FastScheduling)
    #: Plugin names removed from the default profile.
    disabled_plugins: frozenset[str] = frozenset()
    #: Extra plugin names (registered by other packages) added to the profile, in order.
    enabled_plugins: tuple[str, ...] = ()
    #: Per-leaf limits on one gang's placement (``topologyConstraints``).
    topology_constraints: TopologyConstraints = field(default_factory=TopologyConstraints)
    #: ``schedulerName`` of a KubeSchedulerConfiguration profile (None: ``topos``).
    scheduler_name: str | None = None
    #: NodeResourcesFit's scoring strategy (kube's ``scoringStrategy.type``).
    node_resources_strategy: str = "LeastAllocated"
    #: PodTopologySpread's default constraints (kube's ``PodTopologySpreadArgs``) for pods
    #: without their own.
    spread_defaults: SpreadDefaults = SYSTEM_SPREAD
    #: How fast a failure's weight halves in HistoricalPerformance.
    history_half_life_s: float = 600.0
    #: The node label naming a leaf (the app copies ``gangs.domainKeys.leaf`` here).
    leaf_label: str = "topos.io/leaf"
    #: The weights AgentPool pods are scored with (``agentPools``; default: the NeuroNetes
    #: guide's 30/25/20/15/10 factors over the other weights).
    pool_weights: ScoreWeights = field(default_factory=lambda: pool_profile(ScoreWeights()))
    #: What nodes cost (``prices``): CostEfficiency and the AgentPool controller read it.
    prices: PriceTable = field(default_factory=PriceTable)
    #: Users' Score plugins (``customScorers``), in the order given.
    custom_scorers: tuple[CustomScorer, ...] = ()

    def weight_of(self, plugin: str, *, pool: bool = False) -> int:
        """The score weight of ``plugin`` for ordinary pods, or (``pool``) AgentPool pods."""
        for custom in self.custom_scorers:
            if custom.name == plugin:
                return custom.weight
        return (self.pool_weights if pool else self.weights).for_plugin(plugin)

    #: ``fragmentation.allPods``: score whole-GPU and CPU-only pods by fragmentation growth too;
    #: ``None`` (``auto``, the default): while pods sharing a GPU are seen (docs/sharing.md).
    fragmentation_all_pods: bool | None = None
    #: ``fragmentation.shapeHalfLife``: pods after which a seen pod shape weighs half.
    fragmentation_half_life: int = 2000

    def nodes_to_score(self, total: int) -> int:
        """How many feasible nodes a cycle looks for among ``total`` before it stops filtering:
        kube-scheduler's rule for the percentage, capped by ``fast_scheduling``."""
        want = num_feasible_nodes_to_find(total, self.percentage_of_nodes_to_score)
        if self.fast_scheduling.enabled:
            want = min(want, self.fast_scheduling.max_nodes_to_score)
        return want

    def __post_init__(self) -> None:
        if self.packing not in ("binpack", "spread"):
            raise ConfigError(
                f"packing: unknown mode {self.packing!r} (expected binpack or spread)"
            )
        if not 0 <= self.percentage_of_nodes_to_score <= 100:
            raise ConfigError("percentageOfNodesToScore: must be from 0 to 100")
        for where, weights in (
            ("weights", self.weights),
            ("agentPools.weights", self.pool_weights),
        ):
            for f in dataclasses.fields(weights):
                value = getattr(weights, f.name)
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
                    raise ConfigError(f"{where}.{f.name}: must be an integer from 0 to 100")


#: The NeuroNetes guide's scoring factors: the AgentPool profile unless ``agentPools`` says.
GUIDE_FACTORS: Final = {
    "gpuAvailability": 30,
    "topologyFitness": 25,
    "modelCachePresence": 20,
    "costEfficiency": 15,
    "dataLocality": 10,
}


def pool_profile(
    base: ScoreWeights,
    factors: Mapping[str, object] | None = None,
    weights: Mapping[str, object] | None = None,
) -> ScoreWeights:
    """``base`` with the factors' weights (default: the guide's) and then ``weights`` over it."""
    merged: dict[str, object] = dict(seedforms.factor_weights(factors or GUIDE_FACTORS))
    merged.update(weights or {})
    try:
        return dataclasses.replace(base, **merged)  # type: ignore[arg-type]
    except TypeError as exc:
        raise ConfigError(f"agentPools.weights: {exc}") from None


def num_feasible_nodes_to_find(total: int, percentage: int) -> int:
    """kube-scheduler's rule: every node below 100 nodes or at 100 %; else the percentage
    (0: adaptive, 50 % - 1 % per 125 nodes, at least 5 %) of the nodes, at least 100."""
    if total < _MIN_FEASIBLE or percentage >= 100:
        return total
    if percentage <= 0:
        percentage = max(5, 50 - total // 125)
    return max(_MIN_FEASIBLE, total * percentage // 100)


_MIN_FEASIBLE: Final = 100

_KEYS: Final = frozenset(
    {
        "weights",
        "packing",
        "percentageOfNodesToScore",
        "percentage_of_nodes_to_score",
        "fastScheduling",
        "disabled_plugins",
        "enabled_plugins",
        # the seeds' shapes (seedforms.py)
        "scoringWeights",
        "topologyConstraints",
        "profiles",
        "historyHalfLifeSeconds",
        # AgentPools (issue 18; docs/neuronetes-policies.md)
        "agentPools",
        "prices",
        "customScorers",
        "fragmentation",
    }
)


def load_config(source: str | Mapping[str, object] | None) -> SchedulerConfig:
    """A config from YAML text or an already decoded mapping (``None``/empty: the defaults)."""
    if source is None:
        return SchedulerConfig()
    if isinstance(source, str):
        try:
            data = load_yaml(source)  # a key given twice in one mapping is refused
        except yaml.YAMLError as exc:
            raise ConfigError(f"scheduler config is not valid YAML: {exc}") from None
    else:
        data = source
    if data is None:
        return SchedulerConfig()
    if not isinstance(data, Mapping):
        raise ConfigError("scheduler config must be a mapping")
    non_finite = first_non_finite(data)
    if non_finite is not None:
        where, number = non_finite
        raise ConfigError(f"{where}: expected a finite number, got {yaml_number(number)}")
    data = seedforms.unwrap(data)
    for key in data:
        if key not in _KEYS:
            raise ConfigError(f"{key}: unknown key{hint(str(key), _KEYS)}")
    weights_raw = data.get("weights") or {}
    if not isinstance(weights_raw, Mapping):
        raise ConfigError("weights: must be a mapping")
    names = {f.name for f in dataclasses.fields(ScoreWeights)}
    for key in weights_raw:
        if key not in names:
            raise ConfigError(f"weights.{key}: unknown weight{hint(str(key), names)}")
    # Seed factors first, a profile's weights over them, this file's own ``weights`` last.
    merged: dict[str, object] = {}
    if data.get("scoringWeights") is not None:
        merged.update(seedforms.factor_weights(data["scoringWeights"]))
    profile = seedforms.ProfileSettings()
    if data.get("profiles") is not None:
        profile = seedforms.read_profiles(data["profiles"], PLUGIN_WEIGHT, BUILT_IN_PLUGINS)
        merged.update(profile.weights)
    merged.update({str(k): v for k, v in weights_raw.items()})
    try:
        weights = ScoreWeights(**merged)  # type: ignore[arg-type]
    except TypeError as exc:
        raise ConfigError(f"weights: {exc}") from None
    kwargs: dict[str, object] = {"weights": weights}
    if "packing" in data:
        kwargs["packing"] = data["packing"]
    spelled = [k for k in ("percentageOfNodesToScore", "percentage_of_nodes_to_score") if k in data]
    if len(spelled) > 1:
        raise ConfigError(
            "percentageOfNodesToScore: given twice (also as percentage_of_nodes_to_score)"
        )
    for key in spelled:
        pct = data[key]
        if isinstance(pct, bool) or not isinstance(pct, int):
            raise ConfigError(f"{key}: must be an integer from 0 to 100")
        if not 0 <= pct <= 100:
            raise ConfigError(f"{key}: must be from 0 to 100 (0: kube's adaptive rule), not {pct}")
        kwargs["percentage_of_nodes_to_score"] = pct
    if "fastScheduling" in data:
        kwargs["fast_scheduling"] = _fast_scheduling(data["fastScheduling"])
    for key in ("disabled_plugins", "enabled_plugins"):
        if key in data:
            value = data[key]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{key}: must be a list of plugin names")
            kwargs[key] = frozenset(value) if key == "disabled_plugins" else tuple(value)
    if data.get("topologyConstraints") is not None:
        kwargs["topology_constraints"] = _constraints(data["topologyConstraints"])
    if "historyHalfLifeSeconds" in data:
        half = data["historyHalfLifeSeconds"]
        if isinstance(half, bool) or not isinstance(half, int | float) or not 0 < half < 1e9:
            raise ConfigError("historyHalfLifeSeconds: must be a number of seconds above 0")
        kwargs["history_half_life_s"] = float(half)
    if data.get("fragmentation") is not None:
        kwargs.update(_fragmentation(data["fragmentation"]))
    if profile.disabled:
        listed = kwargs.get("disabled_plugins")
        before = listed if isinstance(listed, frozenset) else frozenset()
        kwargs["disabled_plugins"] = before | profile.disabled
    if profile.scheduler_name is not None:
        kwargs["scheduler_name"] = profile.scheduler_name
    if profile.node_resources_strategy is not None:
        kwargs["node_resources_strategy"] = profile.node_resources_strategy
    if profile.spread_defaults is not None:
        kwargs["spread_defaults"] = profile.spread_defaults
    kwargs["pool_weights"] = _agent_pools(data.get("agentPools"), weights, names)
    kwargs["prices"] = read_prices(data.get("prices"))
    kwargs["custom_scorers"] = read_custom_scorers(data.get("customScorers"), BUILT_IN_PLUGINS)
    config = SchedulerConfig(**kwargs)  # type: ignore[arg-type]
    _check_disabled(config)
    return config


def _check_disabled(config: SchedulerConfig) -> None:
    """Every name ``disabled_plugins`` lists is a plugin the profile could run: a built-in one,
    one ``enabled_plugins`` adds or a custom scorer (a misspelt name would disable nothing)."""
    known = BUILT_IN_PLUGINS | set(config.enabled_plugins)
    known |= {custom.name for custom in config.custom_scorers}
    for name in sorted(config.disabled_plugins - known):
        raise ConfigError(f"disabled_plugins: {unknown_plugin(name, known)}")


def unknown_plugin(name: str, known: Collection[str]) -> str:
    """``unknown plugin 'X' — did you mean 'Y'? (the plugins: …)``: the name and every valid one."""
    close = difflib.get_close_matches(name, list(known), n=1)
    guess = f" — did you mean {close[0]!r}?" if close else ""
    return f"unknown plugin {name!r}{guess} (the plugins: {', '.join(sorted(known))})"


def _agent_pools(raw: object, base: ScoreWeights, names: set[str]) -> ScoreWeights:
    """``agentPools: {scoringWeights: {...factors}, weights: {...}}`` over the weights above."""
    if raw is None:
        return pool_profile(base)
    if not isinstance(raw, Mapping):
        raise ConfigError("agentPools: must be a mapping (scoringWeights, weights)")
    for key in raw:
        if key not in ("scoringWeights", "weights"):
            raise ConfigError(
                f"agentPools.{key}: unknown key{hint(str(key), {'scoringWeights', 'weights'})}"
            )
    factors = raw.get("scoringWeights")
    if factors is not None and not isinstance(factors, Mapping):
        raise ConfigError("agentPools.scoringWeights: must be a mapping of factors to weights")
    weights = raw.get("weights") or {}
    if not isinstance(weights, Mapping):
        raise ConfigError("agentPools.weights: must be a mapping")
    for key in weights:
        if key not in names:
            raise ConfigError(f"agentPools.weights.{key}: unknown weight{hint(str(key), names)}")
    try:
        return pool_profile(base, factors, {str(k): v for k, v in weights.items()})
    except ConfigError as exc:
        raise ConfigError(
            str(exc).replace("scoringWeights", "agentPools.scoringWeights", 1)
        ) from None


def _constraints(raw: object) -> TopologyConstraints:
    if not isinstance(raw, Mapping):
        raise ConfigError("topologyConstraints: must be a mapping")
    known = {"maxNodesPerLeaf", "maxGPUsPerLeaf"}
    for key in raw:
        if key not in known:
            raise ConfigError(f"topologyConstraints.{key}: unknown key{hint(str(key), known)}")
    values: dict[str, int | None] = {}
    for key in known:
        value = raw.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ConfigError(f"topologyConstraints.{key}: must be a whole number of at least 1")
        values[key] = value
    return TopologyConstraints(
        max_nodes_per_leaf=values["maxNodesPerLeaf"], max_gpus_per_leaf=values["maxGPUsPerLeaf"]
    )


def _fragmentation(raw: object) -> dict[str, object]:
    if not isinstance(raw, Mapping):
        raise ConfigError("fragmentation: must be a mapping ({allPods: auto, shapeHalfLife: 2000})")
    known = {"allPods", "shapeHalfLife"}
    for key in raw:
        if key not in known:
            raise ConfigError(f"fragmentation.{key}: unknown key{hint(str(key), known)}")
    out: dict[str, object] = {}
    if "allPods" in raw:
        if not isinstance(raw["allPods"], bool) and raw["allPods"] != "auto":
            raise ConfigError("fragmentation.allPods: must be true, false or auto")
        out["fragmentation_all_pods"] = None if raw["allPods"] == "auto" else raw["allPods"]
    if "shapeHalfLife" in raw:
        half = raw["shapeHalfLife"]
        if isinstance(half, bool) or not isinstance(half, int) or half < 1:
            raise ConfigError("fragmentation.shapeHalfLife: must be a whole number of pods, ≥ 1")
        out["fragmentation_half_life"] = half
    return out


def _fast_scheduling(raw: object) -> FastScheduling:
    if raw is None:
        return FastScheduling()
    if not isinstance(raw, Mapping):
        raise ConfigError(
            "fastScheduling: must be a mapping ({enabled: true, maxNodesToScore: 50})"
        )
    known = {"enabled", "maxNodesToScore"}
    for key in raw:
        if key not in known:
            raise ConfigError(f"fastScheduling.{key}: unknown key{hint(str(key), known)}")
    enabled = raw.get("enabled", True)
    count = raw.get("maxNodesToScore", 50)
    return FastScheduling(enabled=enabled, max_nodes_to_score=count)
