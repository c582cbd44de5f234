"""The ``scheduling`` section, read into the core's typed :class:`SchedulerConfig`.

Loaded from YAML (a file or the ``scheduling`` key of the coordinator's ConfigMap)::

    weights:
      GpuTopology: 5            # by plugin name (docs/scheduling.md lists them)
      numa_fit: 3               # the keys written before weights were by name still work
    packing: binpack          # or spread
    percentageOfNodesToScore: 0      # kube's adaptive rule (the default); 100: every node
    fastScheduling: {enabled: true, maxNodesToScore: 50}
    disabled_plugins: [GpuAvailability]
    topologyConstraints: {maxNodesPerLeaf: 4, maxGPUsPerLeaf: 32}
    scoringWeights: {resourceAvailability: 0.4, topologyAlignment: 0.3}   # the seeds' factors

The seeds' whole objects (a KubeSchedulerConfiguration profile, a topology-scheduler
``SchedulerConfig``) are read by :mod:`.seedforms`, users' scorers found by
:mod:`.customscorers`, the price table by :mod:`.prices`. Unknown keys, negative weights and unknown
modes are rejected with a :class:`ConfigError` naming the key. The reasons behind each default
are in ``docs/scheduling.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

import yaml

from common import podkeys
from common.configdoc import first_non_finite, load_yaml, yaml_number
from coordinator.app.config import seedforms
from coordinator.app.config.customscorers import read_custom_scorers, with_args
from coordinator.app.config.pluginargs import camel, read_plugin_args
from coordinator.app.config.prices import read_prices
from coordinator.core.framework.config import (
    CustomScorer,
    FastScheduling,
    ProcessSettings,
    SchedulerConfig,
    TopologyConstraints,
    unknown_plugin,
)
from coordinator.core.framework.config_errors import ConfigError, hint
from coordinator.core.registry import (
    DEFAULT_PROFILE,
    agent_pool_profile,
    args_types,
    kube_names,
    weight_aliases,
    weights_of,
)

__all__ = ["ConfigError", "load_config"]

#: Every built-in plugin's name.
_BUILT_IN: Final = frozenset(DEFAULT_PROFILE)
#: The weights keys written before weights were by plugin name → the plugins each sets.
_ALIASES: Final = weight_aliases()
#: The built-in scorers (the plugins with a weight).
_SCORERS: Final = frozenset(weights_of(SchedulerConfig()))
#: Every built-in plugin's args type (``None``: it takes none).
_ARGS: Final = args_types()


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
    """A config from YAML text or an already decoded mapping (``None``/empty: the defaults):
    the first profile, the others in its ``other_profiles`` (the AgentPool profile among them)."""
    if source is None:
        source = {}
    if isinstance(source, str):
        try:
            data = load_yaml(source)  # a key given twice in one mapping is refused
        except yaml.YAMLError as exc:
            raise ConfigError(f"scheduler config is not valid YAML: {exc}") from None
    else:
        data = source
    if data is None:
        data = {}
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
    own_weights = _by_plugin("weights", weights_raw)
    factors: dict[str, int] = {}
    if data.get("scoringWeights") is not None:
        factors = _by_plugin("scoringWeights", seedforms.factor_weights(data["scoringWeights"]))
    kwargs: dict[str, object] = {}
    process = ProcessSettings()  # the process's settings: the first profile holds them
    # Section keys that are plugins' arguments: each sets that argument of every plugin taking it.
    section_args: dict[str, object] = {}
    if "packing" in data:
        section_args.update(_args_of_plugins("", {"packing": data["packing"]}))
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
        process = dataclasses.replace(process, history_half_life_s=float(half))
    if data.get("fragmentation") is not None:
        section_args.update(
            _args_of_plugins("fragmentation.", _fragmentation(data["fragmentation"]))
        )
    process = dataclasses.replace(process, prices=read_prices(data.get("prices")))
    # Not a name a profile's plugins or pluginConfig give a built-in plugin either.
    custom = read_custom_scorers(data.get("customScorers"), frozenset(kube_names()))
    kwargs["custom_scorers"] = custom
    settings = [seedforms.ProfileSettings()]
    if data.get("profiles"):
        takes_args = frozenset(name for name, kind in _ARGS.items() if kind is not None)
        takes_args |= {scorer.name for scorer in custom}  # named in pluginConfig as they are
        settings = seedforms.read_profiles(data["profiles"], kube_names(), _SCORERS, takes_args)
    # One config per profile: this section's settings, changed by what the profile says.
    configs = [
        _profile(f"profiles[{i}]", kwargs, section_args, factors, own_weights, p, custom)
        for i, p in enumerate(settings)
    ]
    pools = podkeys.AGENT_POOL_SCHEDULER_NAME
    if any(c.scheduler_name == pools for c in configs):
        if data.get("agentPools") is not None:
            raise ConfigError(
                f"agentPools: profiles names {pools!r} itself; give that profile's weights there"
            )
    else:  # the AgentPool profile: the first profile's plugins, the AgentPool weights
        pool = _agent_pools(data.get("agentPools") or {}, configs[0])
        configs.append(agent_pool_profile(configs[0], pool))
    return dataclasses.replace(
        configs[0],
        other_profiles=tuple(configs[1:]),
        process=process,
    )


def _profile(
    where: str,
    common: Mapping[str, object],
    section_args: Mapping[str, object],
    factors: Mapping[str, int],
    own_weights: Mapping[str, int],
    profile: seedforms.ProfileSettings,
    custom_scorers: tuple[CustomScorer, ...],
) -> SchedulerConfig:
    """One profile's config: seed factors first, the profile's weights over them, the
    section's own ``weights``, then those the profile gives in Topos' form, last; each
    plugin's arguments from the section, changed by the profile's ``pluginConfig`` (a custom
    scorer's too: keyword arguments of its factory)."""
    weights: dict[str, int] = {**factors, **profile.weights, **own_weights}
    weights.update(_by_plugin(f"{where}.weights", profile.own_weights))
    args = dict(section_args)
    custom = {scorer.name: scorer for scorer in custom_scorers}
    for plugin, (at, raw) in profile.args.items():
        if plugin in custom:
            custom[plugin] = with_args(custom[plugin], at, raw)
            continue
        base = args.get(plugin) or _default_args(plugin)
        args[plugin] = read_plugin_args(plugin, at, raw, base)
    kwargs = {**common, "weights": weights, "args": args, "custom_scorers": tuple(custom.values())}
    if profile.disabled:
        listed = kwargs.get("disabled_plugins")
        before = listed if isinstance(listed, frozenset) else frozenset()
        kwargs["disabled_plugins"] = before | profile.disabled
    if profile.scheduler_name is not None:
        kwargs["scheduler_name"] = profile.scheduler_name
    config = SchedulerConfig(**kwargs)  # type: ignore[arg-type]
    _check_disabled(config)
    return config


def _default_args(plugin: str) -> object:
    kind = _ARGS[plugin]
    assert kind is not None  # seedforms refuses pluginConfig for a plugin without args
    return kind()


def _args_of_plugins(prefix: str, given: Mapping[str, object]) -> dict[str, object]:
    """``given`` (args by camelCase key, as the section writes them) as the arguments of every
    built-in plugin whose args type has those keys: ``packing`` is GpuPacking's and
    DomainUtilisation's. ``prefix`` is the section keys' path, for messages."""
    out: dict[str, object] = {}
    for plugin, kind in _ARGS.items():
        if kind is None:
            continue
        base = kind()
        fields = {camel(f.name) for f in dataclasses.fields(base)}
        mine = {k: v for k, v in given.items() if k in fields}
        if mine:
            try:
                out[plugin] = read_plugin_args(plugin, "", mine, base)
            except ConfigError as exc:  # "<where>.key: …" with an empty where
                raise ConfigError(f"{prefix}{str(exc).removeprefix('.')}") from None
    return out


def _by_plugin(where: str, raw: Mapping[Any, object]) -> dict[str, int]:
    """``raw`` (weights by plugin name or by the keys written before) by plugin name."""
    out: dict[str, int] = {}
    known = _SCORERS | set(_ALIASES)
    for key, value in raw.items():
        name = str(key)
        if name not in known:
            raise ConfigError(f"{where}.{name}: unknown weight{hint(name, known)}")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
            raise ConfigError(f"{where}.{name}: must be an integer from 0 to 100")
        for plugin in _ALIASES.get(name, (name,)):
            out[plugin] = value
    return out


def _check_disabled(config: SchedulerConfig) -> None:
    """Every name ``disabled_plugins`` lists is a plugin the profile could run: a built-in one,
    one ``enabled_plugins`` adds or a custom scorer (a misspelt name would disable nothing)."""
    known = _BUILT_IN | set(config.enabled_plugins)
    known |= {custom.name for custom in config.custom_scorers}
    for name in sorted(config.disabled_plugins - known):
        raise ConfigError(f"disabled_plugins: {unknown_plugin(name, known)}")


def _agent_pools(raw: object, config: SchedulerConfig) -> dict[str, int]:
    """``agentPools: {scoringWeights: {...factors}, weights: {...}}``: the AgentPool profile's
    weights by plugin name. With factors, every scorer starts from its weight above (the
    factors replace the guide's); without, from its declared AgentPool default."""
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
    out: dict[str, int] = {}
    if factors is not None:
        out.update(weights_of(config))
        try:
            out.update(_by_plugin("scoringWeights", seedforms.factor_weights(factors)))
        except ConfigError as exc:
            raise ConfigError(f"agentPools.{exc}") from None
    out.update(_by_plugin("agentPools.weights", weights))
    return out


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
    """``fragmentation: {allPods, shapeHalfLife}``: GpuFragmentation's and GpuTopology's args
    (checked by their args types)."""
    if not isinstance(raw, Mapping):
        raise ConfigError("fragmentation: must be a mapping ({allPods: auto, shapeHalfLife: 2000})")
    known = {"allPods", "shapeHalfLife"}
    for key in raw:
        if key not in known:
            raise ConfigError(f"fragmentation.{key}: unknown key{hint(str(key), known)}")
    return {str(k): v for k, v in raw.items()}


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
