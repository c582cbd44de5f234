"""The slice and exclusive-topology keys of a pod: slices of k pods, each inside one domain of a
level, the whole group inside one domain of another (docs/gangs.md, "Slices and exclusive
topology").

Four vocabularies say the same thing, and all become one :class:`SliceAsk`:

- Topos: ``topos.io/slice-size`` (pods per slice), ``topos.io/slice-topology`` (the level each
  slice stays inside), ``topos.io/gang-topology`` (the level the whole group stays inside);
- Kueue's TAS annotations, aliases of those three: ``kueue.x-k8s.io/podset-slice-size``,
  ``…/podset-slice-required-topology``, ``…/podset-required-topology``, and
  ``…/podset-preferred-topology`` (the group's level, tried first but not required);
- JobSet: ``alpha.jobset.sigs.k8s.io/exclusive-topology`` (each child Job is a slice, alone in one
  domain of that level; ``alpha.jobset.sigs.k8s.io/node-selector`` marks JobSet's node-selector
  strategy, where nodeSelectors and taints the user set up choose the domain);
- LeaderWorkerSet: ``leaderworkerset.sigs.k8s.io/exclusive-topology`` (the whole group alone in
  one domain), ``…/subgroup-exclusive-topology`` (each subgroup alone in one domain; its size is
  ``…/subgroup-size``), and ``…/size`` (the group's pods: a leader placed before its workers exist
  is placed where the whole group fits).

A level is a node label key (``topology.kubernetes.io/zone``, ``cloud.provider.com/topology-block``)
or one of the names ``hostname`` (``node``), ``leaf``, ``spine``, ``zone`` (the configured tier
labels). Which slice a pod is in is read from its labels by the gang planner
(:mod:`coordinator.core.gangs.slices`); this module only reads the keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from common import podkeys
from common.labels import is_label_key
from coordinator.core.podspec.fields import FieldError, key_value, written_path

__all__ = [
    "JOBSET_EXCLUSIVE",
    "JOBSET_NODE_SELECTOR",
    "KUEUE_PREFERRED_TOPOLOGY",
    "LEVEL_NAMES",
    "LWS_EXCLUSIVE",
    "LWS_SIZE",
    "LWS_SUBGROUP_EXCLUSIVE",
    "LWS_SUBGROUP_SIZE",
    "MAX_SLICE_SIZE",
    "SliceAsk",
    "slice_ask",
]

JOBSET_EXCLUSIVE: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"
JOBSET_NODE_SELECTOR: Final = "alpha.jobset.sigs.k8s.io/node-selector"
LWS_EXCLUSIVE: Final = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_SUBGROUP_EXCLUSIVE: Final = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
LWS_SUBGROUP_SIZE: Final = "leaderworkerset.sigs.k8s.io/subgroup-size"
LWS_SIZE: Final = "leaderworkerset.sigs.k8s.io/size"
KUEUE_PREFERRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-preferred-topology"

#: Level names accepted besides label keys (resolved against the configured tier labels).
LEVEL_NAMES: Final = ("hostname", "node", "leaf", "spine", "zone")
MAX_SLICE_SIZE: Final = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class SliceAsk:
    """What one pod's keys ask of its group's slices. Keys are as the pod spelled them, for
    messages (``annotation <key>=<value>``)."""

    size: int | None = None  # pods per slice; None: the controller's unit (a Job, a subgroup)
    size_key: str = ""
    level: str | None = None  # the level each slice stays inside (label key or level name)
    level_key: str = ""
    unit: str | None = None  # "job" (JobSet child Job) | "subgroup" (LWS) | None (by rank)
    exclusive: bool = False  # a slice's domain holds no other workload's pods
    gang_level: str | None = None  # the level the whole group stays inside
    gang_level_key: str = ""
    gang_required: bool = True  # False: Kueue's preferred topology (tried first)
    gang_exclusive: bool = False  # the group's domain holds no other workload's pods
    group_size: int | None = None  # the group's pods (LWS size): room planned for them all
    node_selector_strategy: bool = False  # JobSet's node-selector strategy


def _level(key: str, value: str) -> str:
    value = value.strip()
    if value in LEVEL_NAMES or is_label_key(value):
        return value
    raise FieldError(
        f"metadata.annotations[{key}]",
        f"{value!r} is not a node label key nor one of {', '.join(LEVEL_NAMES)}",
    )


def _count(key: str, value: str, *, path: str | None = None) -> int:
    text = value.strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_SLICE_SIZE:
        raise FieldError(
            path or f"metadata.annotations[{key}]",
            f"expected a whole number of pods from 1 to {MAX_SLICE_SIZE}, got {value!r}",
        )
    return int(text)


def _one_level(
    annotations: Mapping[str, str], *spellings: tuple[str, str | None]
) -> tuple[str | None, str]:
    """The one level several keys name (they must agree); ``(None, "")`` when none does."""
    found = [(key, _level(key, value)) for key, value in spellings if value is not None]
    if not found:
        return None, ""
    if len({level for _, level in found}) > 1:
        shown = ", ".join(f"{key}={level!r}" for key, level in found)
        raise FieldError(f"metadata.annotations[{found[0][0]}]", f"contradictory levels: {shown}")
    return found[0][1], found[0][0]


def slice_ask(annotations: Mapping[str, str]) -> SliceAsk | None:
    """The slice keys of a pod's ``annotations``; ``None`` when it writes none. Raises
    :class:`FieldError` naming the key and the value."""
    size_text = key_value(podkeys.SLICE_SIZE, annotations)
    level_text = key_value(podkeys.SLICE_TOPOLOGY, annotations)
    gang_text = key_value(podkeys.GANG_TOPOLOGY, annotations)
    jobset = annotations.get(JOBSET_EXCLUSIVE)
    lws = annotations.get(LWS_EXCLUSIVE)
    lws_sub = annotations.get(LWS_SUBGROUP_EXCLUSIVE)
    preferred = annotations.get(KUEUE_PREFERRED_TOPOLOGY)
    if all(v is None for v in (size_text, level_text, gang_text, jobset, lws, lws_sub, preferred)):
        return None
    size_key = podkeys.spelling(podkeys.SLICE_SIZE, annotations)
    size = None
    if size_text is not None:
        size = _count(size_key, size_text, path=written_path(podkeys.SLICE_SIZE, annotations))
    level_key = podkeys.spelling(podkeys.SLICE_TOPOLOGY, annotations)
    level, level_key = _one_level(
        annotations,
        (level_key, level_text),
        (JOBSET_EXCLUSIVE, jobset),
        (LWS_SUBGROUP_EXCLUSIVE, lws_sub),
    )
    unit = "job" if jobset is not None else "subgroup" if lws_sub is not None else None
    if unit == "subgroup" and size is None:
        sub = annotations.get(LWS_SUBGROUP_SIZE)
        if sub is not None:
            size, size_key = _count(LWS_SUBGROUP_SIZE, sub), LWS_SUBGROUP_SIZE
    if size is not None and level is None:
        raise FieldError(
            f"metadata.annotations[{size_key}]",
            f"slices of {size} pods need a level to stay inside: set "
            f"{podkeys.SLICE_TOPOLOGY.canonical} (hostname, leaf, spine or a node label key)",
        )
    if level is not None and size is None and unit is None:
        raise FieldError(
            f"metadata.annotations[{level_key}]",
            f"a slice level needs a slice size: set {podkeys.SLICE_SIZE.canonical}",
        )
    gang_key = podkeys.spelling(podkeys.GANG_TOPOLOGY, annotations)
    gang_level, gang_key = _one_level(annotations, (gang_key, gang_text), (LWS_EXCLUSIVE, lws))
    required = True
    if gang_level is None and preferred is not None:
        gang_level, gang_key, required = (
            _level(KUEUE_PREFERRED_TOPOLOGY, preferred),
            KUEUE_PREFERRED_TOPOLOGY,
            False,
        )
    group = annotations.get(LWS_SIZE) if lws is not None else None
    return SliceAsk(
        size=size,
        size_key=size_key,
        level=level,
        level_key=level_key,
        unit=unit,
        exclusive=unit is not None,
        gang_level=gang_level,
        gang_level_key=gang_key,
        gang_required=required,
        gang_exclusive=lws is not None,
        group_size=None if group is None else _count(LWS_SIZE, group),
        node_selector_strategy=jobset is not None and JOBSET_NODE_SELECTOR in annotations,
    )
