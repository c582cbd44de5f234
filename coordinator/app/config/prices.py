"""``scheduling.prices``: the price table (:class:`~coordinator.core.framework.prices.PriceTable`)
read from the configuration; a :class:`ConfigError` names the first bad entry. The section's
shape is in :mod:`coordinator.core.framework.prices`."""

from __future__ import annotations

import math
from collections.abc import Mapping

from coordinator.core.framework.config_errors import ConfigError, hint
from coordinator.core.framework.prices import Price, PriceTable

__all__ = ["read_prices"]


def read_prices(raw: object) -> PriceTable:
    """The ``prices`` section; a :class:`ConfigError` names the first bad entry."""
    if raw is None:
        return PriceTable()
    if not isinstance(raw, Mapping):
        raise ConfigError("prices: must be a mapping (instanceTypes, gpuModels, spotFactor)")
    known = {"instanceTypes", "gpuModels", "spotFactor"}
    for key in raw:
        if key not in known:
            raise ConfigError(f"prices.{key}: unknown key{hint(str(key), known)}")
    factor = raw.get("spotFactor")
    if factor is not None and (
        isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 <= factor <= 1
    ):
        raise ConfigError(f"prices.spotFactor: must be a fraction from 0 to 1, not {factor!r}")
    return PriceTable(
        instance_types=_rows("prices.instanceTypes", raw.get("instanceTypes")),
        gpu_models=_rows("prices.gpuModels", raw.get("gpuModels")),
        spot_factor=None if factor is None else float(factor),
    )


def _rows(path: str, raw: object) -> dict[str, Price]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: must be a mapping of names to prices")
    out: dict[str, Price] = {}
    for name, value in raw.items():
        where = f"{path}.{name}"
        if isinstance(value, Mapping):
            for key in value:
                if key not in ("onDemand", "spot"):
                    raise ConfigError(
                        f"{where}.{key}: unknown key{hint(str(key), {'onDemand', 'spot'})}"
                    )
            if "onDemand" not in value:
                raise ConfigError(f"{where}.onDemand: missing (the on-demand $/hour)")
            spot = value.get("spot")
            out[str(name)] = Price(
                _amount(f"{where}.onDemand", value["onDemand"]),
                None if spot is None else _amount(f"{where}.spot", spot),
            )
        else:
            out[str(name)] = Price(_amount(where, value))
    return out


def _amount(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: must be a number of dollars per hour, not {value!r}")
    if value < 0:
        raise ConfigError(f"{where}: a price cannot be negative ({value})")
    return float(value)
