"""A plugin's arguments as users write them (camelCase keys, a KubeSchedulerConfiguration's
``pluginConfig[i].args``), read into the args type its declaration names.

Any args type (a frozen dataclass whose fields have defaults and whose ``__post_init__`` checks
them) is read the same way: each key names a field, a nested mapping a nested args object, and
the keys not given keep ``base``'s values (the ``scheduling`` section's settings, else the
type's defaults). PodTopologySpread's args follow kube-scheduler's own reader
(:mod:`.spreadargs`). A key that names no field is refused with the plugin's keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Final

from coordinator.app.config.spreadargs import read_spread_args
from coordinator.core.framework.config_errors import ConfigError, hint
from coordinator.core.plugins.spreadargs import SpreadDefaults

__all__ = ["camel", "read_plugin_args"]

#: Args types whose reading is not the generic one: ``(where, raw, base) → args``.
_READERS: Final[Mapping[type, Callable[[str, Mapping[str, object], Any], object]]] = {
    SpreadDefaults: lambda where, raw, _: read_spread_args(where, raw),
}


def read_plugin_args(plugin: str, where: str, raw: Mapping[Any, object], base: Any) -> object:
    """``raw`` (the args written at ``where``) over ``base``, an object of ``plugin``'s args
    type."""
    reader = _READERS.get(type(base))
    if reader is not None:
        return reader(where, raw, base)
    return _read(plugin, where, raw, base)


def _read(plugin: str, where: str, raw: Mapping[Any, object], base: Any) -> object:
    fields = {camel(f.name): f.name for f in dataclasses.fields(base)}
    changes: dict[str, object] = {}
    for key, value in raw.items():
        name = fields.get(str(key))
        if name is None:
            takes = ", ".join(sorted(fields))
            raise ConfigError(
                f"{where}.{key}: unknown key{hint(str(key), fields)} ({plugin} takes {takes})"
            )
        current = getattr(base, name)
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}.{key}: must be a mapping")
            value = _read(plugin, f"{where}.{key}", value, current)
        changes[name] = value
    try:
        return dataclasses.replace(base, **changes)
    except ConfigError as exc:  # the args type's own check: "key: what is wrong"
        raise ConfigError(f"{where}.{exc}") from None


def camel(name: str) -> str:
    """``shape_half_life`` → ``shapeHalfLife``: a field's name as users write it."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)
