"""Differently shaped requests a what-if tries when pods do not fit: each a pure change of the pod
objects the user would apply (a key relaxed, fewer GPUs per pod), named in the words the user
would write."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from common import podkeys

__all__ = ["GPU", "ShapeChange", "gpus_per_pod", "relaxations", "with_gpus"]

GPU: Final = podkeys.GPU_RESOURCE

#: Looser ``topos.io/gpu-locality`` values, in order (podkeys.GPU_LOCALITY_VALUES).
_LOCALITY: Final = podkeys.GPU_LOCALITY_VALUES
_STRICT_NUMA: Final = ("single-numa", "isolated", "restricted")


@dataclass(frozen=True, slots=True)
class ShapeChange:
    """A change of every pod of the units that do not fit."""

    kind: str  # relax-locality | relax-numa | span-domains | fewer-gpus
    summary: str
    change: Mapping[str, str]
    apply: Callable[[dict[str, Any]], dict[str, Any]] = field(repr=False)
    steps: int = 1  # how far from what was asked (ranks changes of one kind)


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _first(objs: Sequence[Mapping[str, Any]], names: Sequence[str]) -> tuple[str, str] | None:
    for obj in objs:
        ann = _annotations(obj)
        for name in names:
            if name in ann:
                return name, ann[name]
    return None


def _setting(names: Sequence[str], value: str | None) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def apply(obj: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(obj)
        ann = out.setdefault("metadata", {}).setdefault("annotations", {})
        for name in names:
            ann.pop(name, None)
        if value is not None:
            ann[names[0]] = value
        return out

    return apply


def relaxations(objs: Sequence[Mapping[str, Any]]) -> Iterator[ShapeChange]:
    """Looser placement keys, each family in order of how little it gives up (the caller keeps
    the first of a family that fits)."""
    found = _first(objs, podkeys.GPU_LOCALITY.names)
    if found is not None and found[1] in _LOCALITY:
        name, value = found
        for steps, looser in enumerate(_LOCALITY[_LOCALITY.index(value) + 1 :], start=1):
            yield ShapeChange(
                kind="relax-locality",
                summary=f"ask for {name}: {looser} instead of {value}",
                change={name: looser},
                apply=_setting(podkeys.GPU_LOCALITY.names, looser),
                steps=steps,
            )
    found = _first(objs, podkeys.NUMA_POLICY.names)
    if found is not None and found[1] in _STRICT_NUMA:
        name, value = found
        yield ShapeChange(
            kind="relax-numa",
            summary=f"ask for {name}: best-effort instead of {value}",
            change={name: "best-effort"},
            apply=_setting(podkeys.NUMA_POLICY.names, "best-effort"),
        )
    for key in (podkeys.LATENCY_SENSITIVE, podkeys.NETWORK_BANDWIDTH):
        found = _first(objs, key.names)
        if found is None:
            continue
        name, value = found
        yield ShapeChange(
            kind="span-domains",
            summary=f"drop {name}: {value} so the pods may span spines, not one",
            change={name: ""},
            apply=_setting(key.names, None),
        )


def _count(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def gpus_per_pod(obj: Mapping[str, Any]) -> int:
    """Whole GPUs the pod's containers ask for (limits, else requests), summed."""
    total = 0
    for c in (obj.get("spec") or {}).get("containers") or ():
        resources = c.get("resources") or {} if isinstance(c, Mapping) else {}
        n = _count((resources.get("limits") or {}).get(GPU))
        if n is None:
            n = _count((resources.get("requests") or {}).get(GPU))
        total += n or 0
    return total


def with_gpus(asked: int, wanted: int) -> ShapeChange:
    """Pods asking ``asked`` GPUs (in one container) ask ``wanted`` instead
    (``topos.io/gpu-count`` scaled alike)."""

    def apply(obj: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(obj)
        for c in out.get("spec", {}).get("containers") or ():
            resources = c.get("resources") or {}
            for part in ("limits", "requests"):
                block = resources.get(part) or {}
                if _count(block.get(GPU)):
                    block[GPU] = wanted
        ann = _annotations(out)
        for name in podkeys.GPU_COUNT.names:
            n = _count(ann.get(name))
            if n:  # the workload's GPUs, or each member's: scaled to the new ask
                out["metadata"]["annotations"][name] = str(n * wanted // asked)
        return out

    return ShapeChange(
        kind="fewer-gpus",
        summary=f"ask for {wanted} GPUs per pod instead of {asked}",
        change={GPU: str(wanted)},
        apply=apply,
        steps=asked - wanted,
    )
