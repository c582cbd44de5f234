"""The seed systems' scheduler configuration objects, read into the ``scheduling`` section's terms.

Three shapes are accepted as their authors wrote them (``docs/scheduling.md``, "The seeds'
configuration objects"):

- **topology-scheduler (seeds 003/004)**: ``apiVersion: topology.scheduler/v1alpha1``, ``kind:
  SchedulerConfig`` (or ``TopologySchedulerConfig``), ``metadata``, and a ``spec`` holding
  ``scoringWeights`` and ``topologyConstraints`` — or those two keys directly in ``scheduling``.
- **NeuroNetes (seed 000)**: its five scoring factors, as ``scoringWeights`` too.
- **KubeNexus / kube-scheduler (seed 002)**: a ``KubeSchedulerConfiguration`` with one profile:
  ``schedulerName``, ``plugins.<point>.enabled/disabled`` (with score ``weight``) and
  ``pluginConfig``.

Factor weights may be fractions or percentages: they are normalised (each factor's share of their
sum) and scaled to :data:`FACTOR_SCALE` (at least 1 for a factor above 0); every plugin a factor
maps to gets its share. Anything
not understood is a :class:`ConfigError` naming its path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from coordinator.core.framework.config_errors import ConfigError, hint

__all__ = [
    "FACTORS",
    "FACTOR_SCALE",
    "ProfileSettings",
    "factor_weights",
    "read_profiles",
    "unwrap",
]

#: The sum of the weights a ``scoringWeights`` object is normalised to.
FACTOR_SCALE: Final = 20

#: Seed factor name → the ``weights`` keys (our scorers, as written before weights were by
#: plugin name: aliases, see :func:`coordinator.core.registry.weight_aliases`) it sets.
FACTORS: Final[Mapping[str, tuple[str, ...]]] = {
    # topology-scheduler (seeds 003/004)
    "resourceAvailability": ("bin_packing", "node_resources"),
    "topologyAlignment": ("topology_fitness", "numa_fit"),
    "domainUtilization": ("domain_utilisation",),
    "historicalPerformance": ("historical_performance",),
    # NeuroNetes (seed 000)
    "gpuAvailability": ("bin_packing", "gpu_availability"),
    "topologyFitness": ("topology_fitness", "numa_fit"),
    # The ModelCache and CostEfficiency scorers (AgentPool pods), and a pod's own preferred
    # node affinity (the label-based way to say "cached here" or "cheap").
    "modelCachePresence": ("model_cache", "node_affinity"),
    "costEfficiency": ("cost_efficiency", "node_affinity"),
    # Co-location with vector stores and caches is pod affinity.
    "dataLocality": ("inter_pod_affinity",),
}

_TOPOLOGY_KINDS: Final = frozenset({"SchedulerConfig", "TopologySchedulerConfig"})
_KUBE_KIND: Final = "KubeSchedulerConfiguration"
_API_VERSIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "SchedulerConfig": ("topology.scheduler/v1alpha1",),
    "TopologySchedulerConfig": ("topology.scheduler/v1alpha1",),
    "KubeSchedulerConfiguration": (
        "kubescheduler.config.k8s.io/v1",
        "kubescheduler.config.k8s.io/v1beta3",
    ),
}
_KUBE_KEYS: Final = frozenset({"apiVersion", "kind", "profiles", "percentageOfNodesToScore"})


def unwrap(data: Mapping[str, object]) -> Mapping[str, object]:
    """A whole seed object (``apiVersion``/``kind``) as plain ``scheduling`` keys; other
    mappings unchanged."""
    if "kind" not in data and "apiVersion" not in data:
        return data
    kind = data.get("kind")
    version = data.get("apiVersion")
    expected = _API_VERSIONS.get(str(kind))
    if expected is not None and version is not None and version not in expected:
        raise ConfigError(
            f"apiVersion: {version!r} is not a version of {kind} Topos reads "
            f"(expected {' or '.join(expected)})"
        )
    if kind in _TOPOLOGY_KINDS:
        for key in data:
            if key not in ("apiVersion", "kind", "metadata", "spec"):
                raise ConfigError(f"{key}: unknown key in a {kind}{hint(str(key), {'spec'})}")
        spec = data.get("spec") or {}
        if not isinstance(spec, Mapping):
            raise ConfigError("spec: must be a mapping")
        return spec
    if kind == _KUBE_KIND:
        for key in data:
            if key not in _KUBE_KEYS:
                raise ConfigError(f"{key}: unknown key in a {kind}{hint(str(key), _KUBE_KEYS)}")
        return {k: v for k, v in data.items() if k not in ("apiVersion", "kind")}
    raise ConfigError(
        f"kind: {kind!r} is not a scheduler configuration Topos reads "
        f"(expected {_KUBE_KIND}, SchedulerConfig or TopologySchedulerConfig)"
    )


def factor_weights(raw: object) -> dict[str, int]:
    """``scoringWeights`` (factor → fraction, number or ``"30%"``) as ``weights`` fields."""
    if not isinstance(raw, Mapping):
        raise ConfigError("scoringWeights: must be a mapping of factor names to weights")
    shares: dict[str, float] = {}
    for key, value in raw.items():
        name = str(key)
        if name not in FACTORS:
            raise ConfigError(f"scoringWeights.{name}: unknown factor{hint(name, set(FACTORS))}")
        shares[name] = _amount(f"scoringWeights.{name}", value)
    total = sum(shares.values())
    if total <= 0:
        raise ConfigError("scoringWeights: at least one weight must be above 0")
    out: dict[str, int] = {}
    for name, share in shares.items():
        # A factor given any weight keeps at least 1: rounding never switches it off.
        scaled = max(1, round(FACTOR_SCALE * share / total)) if share else 0
        for target in FACTORS[name]:
            out[target] = out.get(target, 0) + scaled
    return out


def _amount(path: str, value: object) -> float:
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            number = float(value.strip()[:-1])
        except ValueError:
            number = -1.0
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        number = -1.0
    if not 0 <= number < float("inf"):
        raise ConfigError(
            f"{path}: must be a number of at least 0 (or a percentage), not {value!r}"
        )
    return number


# --- KubeSchedulerConfiguration profiles ---------------------------------------------------------

#: Built into every Topos profile (gangs, the queue's order, binding, preemption): enabling them
#: changes nothing, disabling them is refused.
BUILT_IN: Final = frozenset(
    {"Coscheduling", "PrioritySort", "DefaultBinder", "DefaultPreemption", "SchedulingGates"}
)
#: kube-scheduler plugins Topos does not run: disabling them is a no-op, enabling them refused.
NOT_RUN: Final = frozenset(
    {
        "ImageLocality",
        "VolumeZone",
        "NodeName",
        "NodeResourcesBalancedAllocation",
    }
)
_POINTS: Final = frozenset(
    {
        "multiPoint",
        "queueSort",
        "preEnqueue",
        "preFilter",
        "filter",
        "postFilter",
        "preScore",
        "score",
        "reserve",
        "permit",
        "preBind",
        "bind",
        "postBind",
    }
)
_SCORE_ONLY: Final = frozenset({"score", "preScore"})


@dataclass(slots=True)
class ProfileSettings:
    """What a profile changes: plugins off, score weights, the scheduler's name, plugin args."""

    disabled: set[str] = field(default_factory=set)
    weights: dict[str, int] = field(default_factory=dict)  # plugin name → weight
    scheduler_name: str | None = None
    #: ``pluginConfig``: plugin name → (where its args were written, the args as written).
    args: dict[str, tuple[str, Mapping[Any, object]]] = field(default_factory=dict)
    #: The plugins that take arguments (an entry for another is refused).
    takes_args: frozenset[str] = frozenset()
    #: Topos' own ``weights`` given in the profile (by plugin name or the older keys).
    own_weights: dict[object, object] = field(default_factory=dict)


def read_profiles(
    raw: object, names: Mapping[str, str], scorers: frozenset[str], takes_args: frozenset[str]
) -> list[ProfileSettings]:
    """``profiles``: one :class:`ProfileSettings` per KubeSchedulerConfiguration profile, each
    served under its own ``schedulerName``. ``names`` maps every name a profile may give a
    Topos plugin to the plugin's own; ``scorers`` are those that score, ``takes_args`` those
    that take arguments (the custom scorers among them, by their ``customScorers`` names).
    Besides kube's keys a profile may give Topos' own ``weights`` (by plugin name)."""
    if not isinstance(raw, list):
        raise ConfigError("profiles: must be a list of profiles")
    out: list[ProfileSettings] = []
    seen: dict[str | None, int] = {}
    for i, profile in enumerate(raw):
        read = _read_profile(
            f"profiles[{i}]", profile, names, scorers, takes_args, several=len(raw) > 1
        )
        if read.scheduler_name in seen:
            raise ConfigError(
                f"profiles[{i}].schedulerName: {read.scheduler_name!r} is already the name of "
                f"profiles[{seen[read.scheduler_name]}]"
            )
        seen[read.scheduler_name] = i
        out.append(read)
    return out


_PROFILE_KEYS: Final = frozenset({"schedulerName", "plugins", "pluginConfig", "weights"})


def _read_profile(
    where: str,
    profile: object,
    names: Mapping[str, str],
    scorers: frozenset[str],
    takes_args: frozenset[str],
    *,
    several: bool,
) -> ProfileSettings:
    out = ProfileSettings(takes_args=takes_args)
    if not isinstance(profile, Mapping):
        raise ConfigError(f"{where}: must be a mapping")
    for key in profile:
        if key not in _PROFILE_KEYS:
            raise ConfigError(f"{where}.{key}: unknown key{hint(str(key), _PROFILE_KEYS)}")
    name = profile.get("schedulerName")
    if name is not None:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}.schedulerName: must be a non-empty string")
        out.scheduler_name = name
    elif several:
        raise ConfigError(f"{where}.schedulerName: each of several profiles needs its own name")
    points = profile.get("plugins") or {}
    if not isinstance(points, Mapping):
        raise ConfigError(f"{where}.plugins: must be a mapping of extension points")
    for point, sets in points.items():
        _read_point(f"{where}.plugins.{point}", str(point), sets, names, scorers, out)
    _read_plugin_config(where, profile.get("pluginConfig") or [], names, out)
    own = profile.get("weights")
    if own is not None and not isinstance(own, Mapping):
        raise ConfigError(f"{where}.weights: must be a mapping of plugin names to weights")
    out.own_weights = dict(own or {})
    return out


def _read_point(
    path: str,
    point: str,
    sets: object,
    names: Mapping[str, str],
    scorers: frozenset[str],
    out: ProfileSettings,
) -> None:
    if point not in _POINTS:
        raise ConfigError(f"{path}: unknown extension point{hint(point, set(_POINTS))}")
    if not isinstance(sets, Mapping):
        raise ConfigError(f"{path}: must be a mapping with enabled and/or disabled")
    for key in sets:
        if key not in ("enabled", "disabled"):
            raise ConfigError(f"{path}.{key}: unknown key{hint(str(key), {'enabled', 'disabled'})}")
    for which in ("disabled", "enabled"):
        entries = sets.get(which) or []
        if not isinstance(entries, list):
            raise ConfigError(f"{path}.{which}: must be a list of {{name: ...}}")
        for i, entry in enumerate(entries):
            where = f"{path}.{which}[{i}]"
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                raise ConfigError(f"{where}: must be a mapping with a name")
            for key in entry:
                if key not in ("name", "weight"):
                    raise ConfigError(f"{where}.{key}: unknown key{hint(str(key), {'weight'})}")
            _apply(where, point, which, entry, names, scorers, out)


def _apply(
    where: str,
    point: str,
    which: str,
    entry: Mapping[str, object],
    names: Mapping[str, str],
    scorers: frozenset[str],
    out: ProfileSettings,
) -> None:
    given = str(entry["name"])
    if given == "*" and which == "disabled":
        targets = sorted(scorers) if point in _SCORE_ONLY else sorted(set(names.values()))
    elif given in BUILT_IN:
        if which == "disabled":
            raise ConfigError(f"{where}.name: {given} is built into Topos and cannot be disabled")
        return
    elif given in NOT_RUN:
        if which == "enabled":
            raise ConfigError(f"{where}.name: Topos does not run kube-scheduler's {given}")
        return
    else:
        ours = names.get(given)
        if ours is None:
            known = set(names) | BUILT_IN
            raise ConfigError(f"{where}.name: unknown plugin {given!r}{hint(given, known)}")
        targets = [ours]
    weight = entry.get("weight")
    if weight is not None and (point not in ("score", "multiPoint") or which != "enabled"):
        raise ConfigError(f"{where}.weight: a weight belongs to an enabled score plugin")
    for ours in targets:
        scores = ours in scorers
        if which == "disabled":
            if point in _SCORE_ONLY:
                if scores:
                    out.weights[ours] = 0
            else:
                out.disabled.add(ours)
            continue
        out.disabled.discard(ours)
        if weight is not None:
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
                raise ConfigError(f"{where}.weight: must be an integer from 0 to 100")
            if not scores:
                raise ConfigError(f"{where}.weight: {ours} does not score nodes")
            out.weights[ours] = weight
        elif point in _SCORE_ONLY and scores and out.weights.get(ours) == 0:
            del out.weights[ours]  # re-enabled after a "*": back to its default weight


def _read_plugin_config(
    profile: str, raw: object, names: Mapping[str, str], out: ProfileSettings
) -> None:
    """``pluginConfig``: each entry's ``args`` kept, by the plugin's own name, for the
    plugin's args type to read (:mod:`.pluginargs`; a custom scorer's factory). Only a plugin
    that takes arguments may have an entry, and one at most."""
    if not isinstance(raw, list):
        raise ConfigError(f"{profile}.pluginConfig: must be a list of {{name, args}}")
    for i, entry in enumerate(raw):
        where = f"{profile}.pluginConfig[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise ConfigError(f"{where}: must be a mapping with a name")
        for key in entry:
            if key not in ("name", "args"):
                raise ConfigError(f"{where}.{key}: unknown key{hint(str(key), {'args'})}")
        args = entry.get("args") or {}
        if not isinstance(args, Mapping):
            raise ConfigError(f"{where}.args: must be a mapping")
        given = str(entry["name"])
        ours = names.get(given)
        if ours is None and given in out.takes_args:  # a custom scorer: by its own name
            ours = given
        if ours is None and given not in BUILT_IN | NOT_RUN:
            known = set(names) | BUILT_IN | out.takes_args
            raise ConfigError(f"{where}.name: unknown plugin {given!r}{hint(given, known)}")
        if ours is None or ours not in out.takes_args:
            first = next(iter(args), None)
            at = f"{where}.args.{first}" if first is not None else where
            raise ConfigError(f"{at}: {given} takes no args")
        if ours in out.args:
            raise ConfigError(
                f"{where}.name: {given} is configured twice (also by {out.args[ours][0]})"
            )
        out.args[ours] = (f"{where}.args", args)
