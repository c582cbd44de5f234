"""What an AgentPool's pod tells the scheduler (NeuroNetes, issue 18; docs/neuronetes-policies.md).

The AgentPool controller writes, on every pod it owns:

- label ``neuronetes.io/pool=<pool>`` — the pod is an AgentPool pod (PoolPlacement filters it;
  its ``schedulerName`` names the AgentPool profile, ``topos-agentpools``, docs/neuronetes.md);
- annotation ``neuronetes.io/model=<model>`` — the model it serves (the ModelCache scorer);
- annotation ``neuronetes.io/scheduling`` — compact JSON of the pool's ``spec.scheduling``.

Of that JSON the scheduler reads only ``cacheAware``, ``costOptimization`` and ``carbonAware``
(everything else is the controller's); a block with ``enabled: false`` counts as absent. A value of
the wrong type is a :class:`~.fields.FieldError` naming its path, so the pod is reported, not
placed by half its rules.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from coordinator.core.podspec.fields import FieldError

__all__ = [
    "CLEAN_ENERGY_GATE",
    "MODEL_ANNOTATION",
    "POOL_LABEL",
    "SCHEDULING_ANNOTATION",
    "PoolScheduling",
    "holds_model",
    "pool_scheduling",
]

POOL_LABEL: Final = "neuronetes.io/pool"
MODEL_ANNOTATION: Final = "neuronetes.io/model"
SCHEDULING_ANNOTATION: Final = "neuronetes.io/scheduling"
#: The scheduling gate a time-shifted pod waits behind until its clean-energy window opens.
CLEAN_ENERGY_GATE: Final = "neuronetes.io/clean-energy-window"

_PATH: Final = f"metadata.annotations[{SCHEDULING_ANNOTATION}]"


@dataclass(frozen=True, slots=True)
class PoolScheduling:
    """The parts of an AgentPool pod's keys the scorers and filters read."""

    pool: str
    model: str = ""
    #: ``cacheAware.cacheHitWeight``: the model-cache score's share of the pod's total (0–1).
    cache_hit_weight: float | None = None
    #: ``costOptimization.spotEnabled`` (None: not said).
    spot_enabled: bool | None = None
    preferred_regions: tuple[str, ...] = ()
    #: ``carbonAware.maxCarbonIntensity`` in gCO2/kWh.
    max_carbon_intensity: float | None = None


def holds_model(models: Iterable[str], model: str) -> bool:
    """Whether a node's cached ``models`` (its ``topos.io/models``) include ``model``: ``org/name``
    as on the Hub, case-insensitive; a name without an org matches that name under any org. The
    one rule: the ModelCache scorer and the AgentPool controller's cache policy both ask it."""
    want = model.lower()
    for cached in models:
        low = cached.lower()
        if low == want or ("/" not in want and low.rpartition("/")[2] == want):
            return True
    return False


def pool_scheduling(
    labels: Mapping[str, str], annotations: Mapping[str, str]
) -> PoolScheduling | None:
    """The pod's pool keys, or ``None`` for a pod that is neither an AgentPool pod nor names a
    model."""
    pool = labels.get(POOL_LABEL, "")
    model = annotations.get(MODEL_ANNOTATION, "").strip()
    text = annotations.get(SCHEDULING_ANNOTATION)
    if not pool and not model and text is None:
        return None
    spec: Mapping[str, object] = {}
    if text is not None and text.strip():
        try:
            decoded = json.loads(text)
        except ValueError as exc:
            raise FieldError(_PATH, f"not valid JSON ({exc})") from None
        if not isinstance(decoded, Mapping):
            raise FieldError(_PATH, "must be a JSON object (the pool's spec.scheduling)")
        spec = decoded
    cache = _block(spec, "cacheAware")
    cost = _block(spec, "costOptimization")
    carbon = _block(spec, "carbonAware")
    weight = _number(cache, "cacheAware.cacheHitWeight")
    if weight is not None and not 0 <= weight < 1:
        raise FieldError(
            f"{_PATH}.cacheAware.cacheHitWeight", f"must be from 0 to below 1, not {weight}"
        )
    spot = cost.get("spotEnabled")
    if spot is not None and not isinstance(spot, bool):
        raise FieldError(f"{_PATH}.costOptimization.spotEnabled", "must be true or false")
    regions = carbon.get("preferredRegions") or []
    if not isinstance(regions, list) or not all(isinstance(r, str) and r for r in regions):
        raise FieldError(f"{_PATH}.carbonAware.preferredRegions", "must be a list of region names")
    limit = _number(carbon, "carbonAware.maxCarbonIntensity")
    if limit is not None and limit < 0:
        raise FieldError(
            f"{_PATH}.carbonAware.maxCarbonIntensity", f"must be at least 0 gCO2/kWh, not {limit}"
        )
    return PoolScheduling(
        pool=pool,
        model=model,
        cache_hit_weight=weight,
        spot_enabled=spot,
        preferred_regions=tuple(regions),
        max_carbon_intensity=limit,
    )


def _block(spec: Mapping[str, object], key: str) -> Mapping[str, object]:
    value = spec.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FieldError(f"{_PATH}.{key}", "must be an object")
    if value.get("enabled", True) is False:
        return {}
    return value


def _number(block: Mapping[str, object], path: str) -> float | None:
    value = block.get(path.rpartition(".")[2])
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FieldError(f"{_PATH}.{path}", f"must be a number, not {value!r}")
    return float(value)
