"""``scheduling.customScorers``: users' Score plugins, found by module path or entry point.

::

    customScorers:
      - name: PreferLabel                      # the plugin's name in explanations
        module: examples.scorers.prefer_label:PreferLabel
        weight: 3                              # 0–100, like the built-in weights
      - name: Power
        entryPoint: power                      # an entry point of group ``topos.scorers``
    profiles:
      - pluginConfig:                          # kube-scheduler's form, as for built-in plugins
          - name: PreferLabel
            args: {label: team, value: ml}     # keyword arguments of the factory

The target (``package.module:attribute``, or the entry point's) is a callable — usually a class —
called with its args (a profile's ``pluginConfig`` entry naming the scorer: :func:`with_args`) as
keyword arguments; it returns an object with ``name`` (overwritten with the configured name) and
``score(state, pod, node) -> float`` (0–100), optionally ``pre_score`` and ``normalize_scores``
(the interfaces in :mod:`coordinator.core.framework.interfaces`). A target that cannot be
imported, is not callable, or whose factory raises is a :class:`ConfigError` naming the entry,
when the configuration is loaded. The entry's own ``args`` key, read before ``pluginConfig``
took custom scorers, is still read (for every profile) and logged as deprecated. What happens
when a plugin raises while scoring is the :mod:`coordinator.core.plugins.custom` wrapper's
business (skipped for that cycle, logged). docs/neuronetes-policies.md#custom-scorers documents
the API.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import logging
from collections.abc import Callable, Mapping
from typing import Final

from coordinator.core.framework.config import CustomScorer
from coordinator.core.framework.config_errors import ConfigError, hint

__all__ = ["ENTRY_POINT_GROUP", "read_custom_scorers", "with_args"]

log = logging.getLogger(__name__)

#: The entry point group a package registers scorers in
#: (``[project.entry-points."topos.scorers"]`` in its pyproject.toml).
ENTRY_POINT_GROUP: Final = "topos.scorers"


def read_custom_scorers(raw: object, taken: frozenset[str]) -> tuple[CustomScorer, ...]:
    """The entries of ``customScorers``; ``taken`` are names built-in plugins already use."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("customScorers: must be a list of {name, module | entryPoint, weight}")
    out: list[CustomScorer] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        where = f"customScorers[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: must be a mapping")
        known = {"name", "module", "entryPoint", "weight", "args"}
        for key in entry:
            if key not in known:
                raise ConfigError(f"{where}.{key}: unknown key{hint(str(key), known)}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}.name: must be a non-empty string")
        if name in taken or name in seen:
            raise ConfigError(f"{where}.name: {name!r} is already a plugin's name")
        seen.add(name)
        weight = entry.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
            raise ConfigError(f"{where}.weight: must be an integer from 0 to 100")
        args = entry.get("args") or {}
        if "args" in entry:
            log.warning(
                "%s.args is deprecated: give %s's args in a profile's pluginConfig "
                "(profiles: [{pluginConfig: [{name: %s, args: {...}}]}])",
                where,
                name,
                name,
            )
        factory, source = _target(where, entry.get("module"), entry.get("entryPoint"))
        scorer = CustomScorer(name, source, factory, weight)
        out.append(with_args(scorer, f"{where}.args", args))
    return tuple(out)


def with_args(scorer: CustomScorer, where: str, raw: object) -> CustomScorer:
    """``scorer`` with ``raw`` (the args written at ``where``: keyword arguments of its factory)
    over the args it has, tried once: a factory that refuses them is a :class:`ConfigError`
    naming ``where`` (the entry itself when no args are given)."""
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) for k in raw):
        raise ConfigError(f"{where}: must be a mapping of keyword arguments, not {raw!r}")
    at = where if raw else where.removesuffix(".args")
    scorer = dataclasses.replace(scorer, args={**scorer.args, **raw})
    try:
        plugin = scorer.build()
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise ConfigError(f"{at}: {scorer.source} could not be built: {why}") from None
    if not callable(getattr(plugin, "score", None)):
        raise ConfigError(f"{at}: {scorer.source} made an object with no score(state, pod, node)")
    return scorer


def _target(where: str, module: object, entry_point: object) -> tuple[Callable[..., object], str]:
    if (module is None) == (entry_point is None):
        raise ConfigError(f"{where}: give exactly one of module and entryPoint")
    if module is not None:
        if not isinstance(module, str) or module.count(":") != 1:
            raise ConfigError(f"{where}.module: must be 'package.module:attribute', not {module!r}")
        path, attr = module.split(":")
        source = f"module {module}"
        try:
            loaded = getattr(importlib.import_module(path), attr)
        except Exception as exc:  # ImportError, AttributeError, or the module's own failure
            raise ConfigError(
                f"{where}.module: {module} cannot be loaded: {type(exc).__name__}: {exc}"
            ) from None
    else:
        if not isinstance(entry_point, str) or not entry_point:
            raise ConfigError(f"{where}.entryPoint: must be a non-empty string")
        source = f"entry point {entry_point!r} ({ENTRY_POINT_GROUP})"
        found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=entry_point)
        if not found:
            names = {e.name for e in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
            raise ConfigError(
                f"{where}.entryPoint: no {ENTRY_POINT_GROUP} entry point named {entry_point!r}"
                + (hint(entry_point, names) if names else " (none is installed)")
            )
        try:
            loaded = next(iter(found)).load()
        except Exception as exc:
            raise ConfigError(
                f"{where}.entryPoint: {entry_point} cannot be loaded: {type(exc).__name__}: {exc}"
            ) from None
    if not callable(loaded):
        raise ConfigError(f"{where}: {source} is not callable (a class or factory function)")
    return loaded, source
