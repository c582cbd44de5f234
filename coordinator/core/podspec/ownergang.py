"""The pod group a workload declares on its own metadata (a Job's, Deployment's or StatefulSet's
labels or annotations, not its pod template): the same keys a pod declares a gang with.

- the group's name: ``topos.io/gang`` (KubeNexus' ``pod-group.scheduling.kubenexus.io/name``) or
  ``scheduling.x-k8s.io/pod-group`` (the size then comes from that PodGroup object), as a label
  or an annotation;
- its minimum: ``topos.io/gang-min`` (KubeNexus' ``…/min-available``), label or annotation; a
  whole number from 1 to what the workload runs at once (a larger one would never be met).

Spellings that agree may stand side by side; two that disagree, a name that cannot be a label
value, a count that is no count or one larger than the workload's pods, and a minimum with no
group to size are refused with the key and value named, as the same keys on a pod are. Pure:
:func:`coordinator.core.podspec.inherit.inheritance` writes the result onto the pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from common import podkeys
from common.labels import LABEL_VALUE_MAX, is_label_value
from coordinator.core.podspec.gangkeys import member_count

__all__ = ["OwnerGang", "OwnerGangError", "owner_gang"]

_PARTS: Final = ("labels", "annotations")


@dataclass(frozen=True, slots=True)
class OwnerGang:
    """A pod group as the workload's metadata declares it."""

    key: podkeys.Key | None  # GANG or POD_GROUP_X_K8S; None: no name (the placement rule names it)
    name: str
    min_member: int | None  # None: not written


@dataclass(frozen=True, slots=True)
class OwnerGangError:
    """A group key on the workload that cannot be used; ``gang``: the group's name if known."""

    gang: str | None
    field: str  # e.g. "Job ml/train metadata.annotations[topos.io/gang-min]"
    message: str

    @property
    def text(self) -> str:
        return f"{self.field}: {self.message}"


def _written(
    what: str, key: podkeys.Key, parts: Mapping[str, Mapping[str, str]]
) -> list[tuple[str, str]]:
    """``(field, value)`` for every spelling of ``key`` the metadata carries, labels first."""
    return [
        (f"{what} metadata.{part}[{name}]", values[name])
        for name in key.names
        for part, values in parts.items()
        if name in values
    ]


def _one(found: list[tuple[str, str]]) -> tuple[str, str] | OwnerGangError | None:
    """The one value these spellings agree on (surrounding whitespace ignored)."""
    if not found:
        return None
    field, value = found[0]
    other = next(((f, v) for f, v in found[1:] if v.strip() != value.strip()), None)
    if other is not None:
        return OwnerGangError(None, field, f"contradicts {other[0]}={other[1]!r}; use one value")
    return field, value.strip()


def owner_gang(
    what: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    *,
    most: int,
    placed: bool,
) -> OwnerGang | OwnerGangError | None:
    """The group the metadata of ``what`` (``"Job ml/train"``) declares, ``None`` for none.

    ``most``: the pods the workload runs at once (the largest minimum that can be met);
    ``placed``: the workload asks for a placement, so Topos makes a group of it anyway and a
    minimum alone sizes that group."""
    parts = dict(zip(_PARTS, (labels, annotations), strict=True))
    topos = _written(what, podkeys.GANG, parts)
    name = _one(topos + _written(what, podkeys.POD_GROUP_X_K8S, parts))
    if isinstance(name, OwnerGangError):
        return name
    if name is not None:
        field, value = name
        if not value:
            return OwnerGangError(None, field, "must not be empty")
        if not is_label_value(value):
            return OwnerGangError(
                None,
                field,
                f"{value!r} is not a label value (at most {LABEL_VALUE_MAX} letters, digits, "
                "'-', '_' and '.', starting and ending with a letter or digit)",
            )
    gang = name[1] if name is not None else None
    found = _one(_written(what, podkeys.GANG_MIN, parts))
    if isinstance(found, OwnerGangError):
        return OwnerGangError(gang, found.field, found.message)
    if found is not None and name is None and not placed:
        return OwnerGangError(None, found[0], "set without a gang name")
    min_member: int | None = None
    if found is not None:
        field, value = found
        try:
            min_member = member_count(value)
        except ValueError as exc:
            return OwnerGangError(gang, field, str(exc))
        if min_member > most:
            return OwnerGangError(
                gang,
                field,
                f"the group would wait for ever: {what} runs at most {most} pod(s) at once, "
                f"got {value!r}",
            )
    if name is None:
        return None if min_member is None else OwnerGang(None, "", min_member)
    return OwnerGang(podkeys.GANG if topos else podkeys.POD_GROUP_X_K8S, name[1], min_member)
