"""The registry: the list of plugin declarations, and building a :class:`Framework` from them.

Each plugin module declares its plugins once (:class:`~.plugins.declaration.PluginSpec`: class,
args type, factory, default weights, aliases); :data:`PLUGINS` lists those declarations in filter
order, and everything else — the default profile, the weights by name, the names a configuration
may use — is read from it. Adding a plugin is its module plus one line here
(docs/architecture.md, "Adding a scorer"). Each plugin is made from its own arguments (the
profile's ``args`` by plugin name, else its args type's defaults) and the process's
:class:`~.plugins.declaration.Context`; never from the whole profile. Other packages add plugins
by passing ``plugins=(*PLUGINS, MY_SPEC)`` (or ``registry={"MyPlugin": factory}``, a factory of
the plugin's arguments) to :func:`build_framework` and naming them in the config's
``enabled_plugins``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from common import podkeys
from coordinator.core.framework.config import ProcessSettings, SchedulerConfig, unknown_plugin
from coordinator.core.framework.prices import PriceTable
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.profiles import Profiles
from coordinator.core.plugins import (
    cliquekeep,
    domainclique,
    domainscore,
    dynamicresources,
    fragscore,
    gpu,
    groupspread,
    interconnect,
    interpodaffinity,
    nodeaffinity,
    nodeports,
    noderesources,
    nodestate,
    nodevolumelimits,
    podtopologyspread,
    pools,
    tainttoleration,
    volumebinding,
    volumerestrictions,
)
from coordinator.core.plugins.custom import GuardedScorer
from coordinator.core.plugins.declaration import DEFAULT_LEAF_LABEL, AnySpec, Context
from coordinator.core.plugins.domainscore import DomainHistory
from coordinator.core.plugins.pools import CarbonReadings

__all__ = [
    "DEFAULT_PROFILE",
    "PLUGINS",
    "Registry",
    "agent_pool_profile",
    "args_types",
    "build_framework",
    "build_profiles",
    "kube_names",
    "weight_aliases",
    "weights_of",
]

#: Extra plugins by name: a factory gets the plugin's arguments (those of the declared plugin
#: of that name, when it replaces one; else the profile's ``args`` for it, or ``None``).
Registry = Mapping[str, Callable[[object], object]]

# Filter order follows kube-scheduler's (cheap node-level gates first), so the reason a node
# reports is the same one kube would report.
PLUGINS: Final[tuple[AnySpec, ...]] = (
    nodestate.NODE_HEALTH,
    nodestate.NODE_UNSCHEDULABLE,
    tainttoleration.PLUGIN,
    nodeaffinity.PLUGIN,
    pools.POOL_PLACEMENT,
    nodeports.PLUGIN,
    noderesources.PLUGIN,
    gpu.GPU_TOPOLOGY,
    volumerestrictions.PLUGIN,
    nodevolumelimits.PLUGIN,
    volumebinding.PLUGIN,
    dynamicresources.PLUGIN,
    domainclique.PLUGIN,
    podtopologyspread.PLUGIN,
    interpodaffinity.PLUGIN,
    groupspread.PLUGIN,
    gpu.NUMA_TOPOLOGY,
    gpu.GPU_PACKING,
    fragscore.PLUGIN,
    cliquekeep.PLUGIN,
    gpu.GPU_AVAILABILITY,
    interconnect.PLUGIN,
    domainscore.DOMAIN_UTILISATION,
    domainscore.HISTORICAL_PERFORMANCE,
    pools.MODEL_CACHE,
    pools.COST_EFFICIENCY,
    pools.PREFERRED_REGION,
)

#: The plugins a profile runs unless its configuration says otherwise.
DEFAULT_PROFILE: Final = tuple(spec.name for spec in PLUGINS)


def weights_of(config: SchedulerConfig, plugins: Sequence[AnySpec] = PLUGINS) -> dict[str, int]:
    """Every scorer's weight in ``config``, by plugin name: the config's own, else the
    declaration's default."""
    out: dict[str, int] = {}
    for spec in plugins:
        if spec.weight is not None:
            out[spec.name] = config.weights.get(spec.name, spec.weight)
    for custom in config.custom_scorers:
        out[custom.name] = custom.weight
    return out


def agent_pool_profile(
    config: SchedulerConfig,
    weights: Mapping[str, int] | None = None,
    *,
    name: str = podkeys.AGENT_POOL_SCHEDULER_NAME,
    plugins: Sequence[AnySpec] = PLUGINS,
) -> SchedulerConfig:
    """The profile AgentPool pods are scored by: ``config``'s settings under ``name``, each
    scorer weighted as ``weights`` says, else by its declared AgentPool default (the NeuroNetes
    guide's factors, :attr:`~.plugins.declaration.PluginSpec.pool_weight`), else as in
    ``config``. An ordinary profile: the framework knows nothing of AgentPools."""
    ordinary = weights_of(config, plugins)
    defaults = {s.name: s.pool_weight for s in plugins if s.pool_weight is not None}
    merged = {**ordinary, **defaults, **(weights or {})}
    return dataclasses.replace(
        config,
        scheduler_name=name,
        weights=merged,
        other_profiles=(),
        process=ProcessSettings(),  # the process's: the first profile holds them
    )


def weight_aliases(plugins: Sequence[AnySpec] = PLUGINS) -> dict[str, tuple[str, ...]]:
    """The ``weights`` keys users wrote before weights were by plugin name → the plugins each
    sets (``topology_fitness``: GpuTopology and DynamicResources)."""
    out: dict[str, tuple[str, ...]] = {}
    for spec in plugins:
        if spec.weight_key is not None:
            out[spec.weight_key] = (*out.get(spec.weight_key, ()), spec.name)
    return out


def args_types(plugins: Sequence[AnySpec] = PLUGINS) -> dict[str, type | None]:
    """Every plugin's args type by its name (``None``: it takes no arguments)."""
    return {spec.name: spec.args for spec in plugins}


def kube_names(plugins: Sequence[AnySpec] = PLUGINS) -> dict[str, str]:
    """Every name a KubeSchedulerConfiguration may give a plugin → the plugin's own."""
    out = {spec.name: spec.name for spec in plugins}
    for spec in plugins:
        out.update(dict.fromkeys(spec.aliases, spec.name))
    return out


def build_framework(
    config: SchedulerConfig | None = None,
    *,
    registry: Registry | None = None,
    profile: Sequence[str] | None = None,
    history: DomainHistory | None = None,
    carbon: CarbonReadings | None = None,
    leaf_label: str = DEFAULT_LEAF_LABEL,
    prices: PriceTable | None = None,
    plugins: Sequence[AnySpec] = PLUGINS,
) -> Framework:
    """Instantiate the profile's plugins (default: every declared one, minus those the config
    disables, plus those it enables) from ``plugins`` and ``registry``, each given its own
    arguments, then — unless ``profile`` names the plugins — the config's ``customScorers``
    (each guarded: see :mod:`.plugins.custom`). ``history``, ``carbon``, ``leaf_label`` and
    ``prices`` (none: ``config``'s) are the process's (:class:`~.plugins.declaration.Context`)."""
    config = config or SchedulerConfig()
    history = history or DomainHistory(half_life_s=config.process.history_half_life_s)
    context = Context(history, carbon, prices or config.process.prices, leaf_label)
    specs = {spec.name: spec for spec in plugins}

    def args(name: str) -> object:
        spec = specs.get(name)
        default = spec.default_args() if spec is not None else None
        return config.args.get(name, default)

    factories: dict[str, Callable[[], object]] = {
        spec.name: (lambda spec=spec: spec.build(args(spec.name), context))  # type: ignore[misc]
        for spec in plugins
    }
    for name, factory in (registry or {}).items():
        factories[name] = lambda name=name, factory=factory: factory(args(name))  # type: ignore[misc]
    for name in config.args:
        if name not in factories:
            raise KeyError(f"args: {unknown_plugin(name, factories)}")
    names = list(profile if profile is not None else (spec.name for spec in plugins))
    names.extend(n for n in config.enabled_plugins if n not in names)
    made = []
    for name in names:
        if name in config.disabled_plugins:
            continue
        make = factories.get(name)
        if make is None:
            key = "enabled_plugins" if name in config.enabled_plugins else "profile"
            raise KeyError(f"{key}: {unknown_plugin(name, factories)}")
        made.append(make())
    for custom in config.custom_scorers if profile is None else ():
        if custom.name not in config.disabled_plugins:
            made.append(GuardedScorer(custom.build(), custom.name))
    return Framework(config, made, weights=weights_of(config, plugins))


def build_profiles(
    config: SchedulerConfig | None = None,
    *,
    registry: Registry | None = None,
    history: DomainHistory | None = None,
    carbon: CarbonReadings | None = None,
    leaf_label: str = DEFAULT_LEAF_LABEL,
    plugins: Sequence[AnySpec] = PLUGINS,
) -> Profiles:
    """One framework per profile of ``config`` (itself first, then its ``other_profiles``), all
    reading the same ``history``, ``carbon``, prices and ``leaf_label`` (the process's)."""
    config = config or SchedulerConfig()
    history = history or DomainHistory(half_life_s=config.process.history_half_life_s)
    return Profiles(
        build_framework(
            c,
            registry=registry,
            history=history,
            carbon=carbon,
            leaf_label=leaf_label,
            prices=config.process.prices,
            plugins=plugins,
        )
        for c in (config, *config.other_profiles)
    )
