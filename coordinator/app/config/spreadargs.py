"""PodTopologySpread's arguments (kube-scheduler's ``PodTopologySpreadArgs``) read from a
KubeSchedulerConfiguration's ``pluginConfig`` into :class:`SpreadDefaults`. Validation follows
kube-scheduler's ``ValidatePodTopologySpreadArgs``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from coordinator.core.framework.config_errors import ConfigError, hint
from coordinator.core.plugins.spreadargs import SYSTEM_SPREAD, SpreadDefaults
from coordinator.core.podspec.spread import SpreadConstraint

__all__ = ["read_spread_args"]

_KEYS: Final = frozenset({"defaultingType", "defaultConstraints"})
_CONSTRAINT_KEYS: Final = frozenset(
    {
        "maxSkew",
        "topologyKey",
        "whenUnsatisfiable",
        "minDomains",
        "nodeAffinityPolicy",
        "nodeTaintsPolicy",
        "matchLabelKeys",  # accepted as kube does; no effect (the selector is replaced)
        "labelSelector",  # refused below, with kube's reason
    }
)
# A qualified name, with an optional DNS-subdomain prefix (metav1validation.ValidateLabelName).
_NAME: Final = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)")
_PREFIX: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _label_name(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        return False
    return bool(_NAME.fullmatch(name))


def read_spread_args(where: str, args: Mapping[str, object]) -> SpreadDefaults:
    """``pluginConfig[i].args`` of PodTopologySpread (``where``: that path, for messages)."""
    for key in args:
        if key not in _KEYS:
            raise ConfigError(f"{where}.{key}: unknown key{hint(str(key), _KEYS)}")
    kind = args.get("defaultingType", "System")
    raw = args.get("defaultConstraints") or []
    if kind not in ("System", "List"):
        raise ConfigError(
            f"{where}.defaultingType: unsupported value {kind!r} (expected System or List)"
        )
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.defaultConstraints: must be a list of constraints")
    if kind == "System":
        if raw:
            raise ConfigError(
                f"{where}.defaultingType: 'System' cannot be used with defaultConstraints "
                "(set defaultingType: List to use your own)"
            )
        return SYSTEM_SPREAD
    constraints: list[SpreadConstraint] = []
    for i, item in enumerate(raw):
        constraints.append(_constraint(f"{where}.defaultConstraints[{i}]", item))
        for other in constraints[:-1]:
            c = constraints[-1]
            if (other.topology_key, other.when_unsatisfiable) == (
                c.topology_key,
                c.when_unsatisfiable,
            ):
                raise ConfigError(
                    f"{where}.defaultConstraints[{i}]: duplicate "
                    f"{{{c.topology_key}, {c.when_unsatisfiable}}}"
                )
    return SpreadDefaults("List", tuple(constraints))


def _constraint(p: str, item: object) -> SpreadConstraint:
    if not isinstance(item, Mapping):
        raise ConfigError(f"{p}: must be a mapping (maxSkew, topologyKey, whenUnsatisfiable)")
    for key in item:
        if key not in _CONSTRAINT_KEYS:
            raise ConfigError(f"{p}.{key}: unknown key{hint(str(key), _CONSTRAINT_KEYS)}")
    if item.get("labelSelector") is not None:
        raise ConfigError(
            f"{p}.labelSelector: a default constraint must not define a selector "
            "(it is deduced for each pod from the Services and controllers selecting it)"
        )
    skew = item.get("maxSkew")
    if isinstance(skew, bool) or not isinstance(skew, int) or skew < 1:
        raise ConfigError(f"{p}.maxSkew: {skew!r} is not a whole number of at least 1")
    key = item.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise ConfigError(f"{p}.topologyKey: must not be empty")
    if not _label_name(key):
        raise ConfigError(f"{p}.topologyKey: {key!r} is not a valid label key")
    when = item.get("whenUnsatisfiable")
    if when not in ("DoNotSchedule", "ScheduleAnyway"):
        raise ConfigError(
            f"{p}.whenUnsatisfiable: unsupported value {when!r} "
            "(expected DoNotSchedule or ScheduleAnyway)"
        )
    min_domains = item.get("minDomains")
    if min_domains is not None and (
        isinstance(min_domains, bool)
        or not isinstance(min_domains, int)
        or min_domains < 1
        or when != "DoNotSchedule"
    ):
        raise ConfigError(
            f"{p}.minDomains: {min_domains!r} must be a whole number of at least 1, with "
            "whenUnsatisfiable: DoNotSchedule"
        )
    policies = {}
    for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
        value = item.get(name, default)
        if value not in ("Honor", "Ignore"):
            raise ConfigError(f"{p}.{name}: unsupported value {value!r} (expected Honor or Ignore)")
        policies[name] = str(value)
    return SpreadConstraint(
        skew,
        key,
        str(when),
        None,
        min_domains,
        policies["nodeAffinityPolicy"],
        policies["nodeTaintsPolicy"],
    )
