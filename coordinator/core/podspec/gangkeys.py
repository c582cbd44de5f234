"""The gang keys of a pod: which pod group it declares, its size and its timeout.

Labels ``topos.io/gang`` + ``topos.io/gang-min`` (aliases: KubeNexus'
``pod-group.scheduling.kubenexus.io/name`` + ``…/min-available``) or
``scheduling.x-k8s.io/pod-group`` (the size then comes from that PodGroup object), or the pod spec
field ``spec.schedulingGroup.podGroupName`` (Kubernetes' Workload API: the size comes from that
``scheduling.k8s.io/v1alpha2`` PodGroup), or the annotations of Volcano
(``scheduling.k8s.io/group-name``) and KAI (``pod-group-name``) naming their PodGroup objects (the
size comes from that object), and annotation ``topos.io/gang-timeout`` in the grammar
of :mod:`coordinator.core.podspec.durations`. A pod names one group in one vocabulary: a Volcano
or KAI annotation next to another group key is refused, both keys and values named. What a
gang *means* (PodGroup objects, defaults, its state) is :mod:`coordinator.core.gangs`' business;
this module only reads the keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from common import podkeys
from coordinator.core.podspec.durations import DurationError, parse_duration
from coordinator.core.podspec.fields import (
    FieldError,
    key_path,
    key_value,
    mapping,
    str_map,
    text,
    written_path,
)

__all__ = [
    "FOREIGN_GROUP_KEYS",
    "GANG_ERROR",
    "GANG_RUN",
    "MAX_GANG_MEMBERS",
    "SCHEDULING_GROUP_FIELD",
    "GangKeyError",
    "GangLabels",
    "declared_gang",
    "gang_labels",
    "member_count",
    "own",
    "pod_gang_labels",
]

MAX_GANG_MEMBERS: Final = 10_000
SCHEDULING_GROUP_FIELD: Final = "spec.schedulingGroup.podGroupName"
_COUNT: Final = re.compile(r"[+-]?\d{1,12}")
#: Pod annotations naming another scheduler's PodGroup object, and the source each declares.
FOREIGN_GROUP_KEYS: Final = (
    (podkeys.POD_GROUP_VOLCANO, "volcano"),
    (podkeys.POD_GROUP_KAI, "kai"),
)
#: Written by Topos on a workload controller's pod (:mod:`.workloadgangs`): which run of its gang
#: the pod belongs to (label), and why its workload makes no usable gang (annotation,
#: ``"<field>: <reason>"``; the pod then waits with that message).
GANG_RUN: Final = "topos.io/gang-run"
GANG_ERROR: Final = "topos.io/gang-error"


@dataclass(frozen=True, slots=True)
class GangLabels:
    """A gang as one pod's labels and annotations declare it."""

    name: str
    min_member: int | None  # None: from the PodGroup object named ``name`` (x-k8s or workload)
    timeout_s: float | None  # None: not given on the pod
    source: str  # "topos" | "kubenexus" | "x-k8s" | "workload" | "volcano" | "kai" | "pod" (of one)


class GangKeyError(FieldError):
    """A gang key that cannot be used, with the gang's name when the pod names one."""

    def __init__(self, field: str, message: str, gang: str | None) -> None:
        super().__init__(field, message)
        self.gang = gang


def member_count(value: object) -> int:
    """A gang size from 1 to 10,000 (an integer, or its text); ``ValueError`` says what is wrong."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and _COUNT.fullmatch(value.strip()):
        n = int(value.strip())
    else:
        raise ValueError(f"must be a whole number from 1 to {MAX_GANG_MEMBERS}, got {value!r}")
    if n < 1:
        raise ValueError(f"a pod group needs at least 1 member, got {value!r}")
    if n > MAX_GANG_MEMBERS:
        raise ValueError(f"more than {MAX_GANG_MEMBERS} members is not supported, got {value!r}")
    return n


def pod_gang_labels(pod: Mapping[str, object]) -> GangLabels | None:
    """The gang a Pod object (as the API returns it) declares; raises :class:`FieldError`."""
    meta = mapping(pod, "metadata", "")
    labels = str_map(meta, "labels", "metadata")
    annotations = str_map(meta, "annotations", "metadata")
    name = text(meta, "name", "metadata")
    return declared_gang(mapping(pod, "spec", ""), labels, annotations, pod_name=name)


def declared_gang(
    spec: Mapping[str, object],
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    *,
    pod_name: str = "",
) -> GangLabels | None:
    """The gang a pod declares by its labels, by ``spec.schedulingGroup`` or by a Volcano or KAI
    annotation (one, not two); a pod naming none but asking for a network placement is a group
    of its own (:func:`own`)."""
    foreign = _foreign_group(spec, labels, annotations)
    if foreign is not None:
        return foreign
    group = _scheduling_group(spec)
    by_label = gang_labels(labels, annotations)
    if group is None:
        return by_label if by_label is not None else own(pod_name, annotations)
    if by_label is not None:
        raise GangKeyError(
            SCHEDULING_GROUP_FIELD,
            f"pod names two pod groups: {group!r} here and {by_label.name!r} by label; use one",
            group,
        )
    return GangLabels(group, None, _timeout(annotations, group), "workload")


def _timeout(annotations: Mapping[str, str], group: str) -> float | None:
    """``topos.io/gang-timeout`` of a pod whose group is ``group``; ``None`` when not given."""
    timeout_text = key_value(podkeys.GANG_TIMEOUT, annotations)
    if timeout_text is None:
        return None
    try:
        return parse_duration(timeout_text)
    except DurationError as exc:
        path = written_path(podkeys.GANG_TIMEOUT, annotations)
        raise GangKeyError(path, str(exc), group) from None


def _foreign_group(
    spec: Mapping[str, object], labels: Mapping[str, str], annotations: Mapping[str, str]
) -> GangLabels | None:
    """The Volcano or KAI PodGroup a pod names by annotation, ``None`` for none; a second group
    key on the pod (another vocabulary's) is an error naming both keys and their values."""
    named = [
        (key_path(key), annotations[key.canonical], source)
        for key, source in FOREIGN_GROUP_KEYS
        if key.canonical in annotations
    ]
    if not named:
        return None
    path, name, source = named[0]
    others = [(p, v) for p, v, _ in named[1:]]
    for key in (podkeys.GANG, podkeys.POD_GROUP_X_K8S):
        others += [(key_path(key, n), labels[n]) for n in key.names if n in labels]
    group = mapping(spec, "schedulingGroup", "spec").get("podGroupName")
    if group is not None:
        others.append((SCHEDULING_GROUP_FIELD, str(group)))
    if others:
        shown = " and ".join(f"{p}={v!r}" for p, v in [(path, name), *others])
        raise GangKeyError(path, f"pod names two pod groups: {shown}; use one", name or None)
    if not name.strip():
        raise GangKeyError(path, "must not be empty", None)
    name = name.strip()
    return GangLabels(name, None, _timeout(annotations, name), source)


def own(pod_name: str, annotations: Mapping[str, str]) -> GangLabels | None:
    """A pod of one: a pod that names no group but carries a placement key
    (:data:`~common.podkeys.PLACEMENT_KEYS`: a bare Pod, or one whose controller passes nothing
    on) is a group of one member named after it (``source="pod"``), so the gang step reads,
    checks and honours its keys exactly as it does a Job's."""
    if not pod_name:
        return None
    if not any(name in annotations for key in podkeys.PLACEMENT_KEYS for name in key.names):
        return None
    return GangLabels(pod_name, 1, None, "pod")


def _scheduling_group(spec: Mapping[str, object]) -> str | None:
    """``spec.schedulingGroup.podGroupName`` (Workload API), ``None`` when the pod has none."""
    group = mapping(spec, "schedulingGroup", "spec")
    name = text(group, "podGroupName", "spec.schedulingGroup")
    if "podGroupName" in group and not name:
        raise FieldError(SCHEDULING_GROUP_FIELD, "must not be empty")
    return name or None


def gang_labels(labels: Mapping[str, str], annotations: Mapping[str, str]) -> GangLabels | None:
    """The gang these labels and annotations declare, ``None`` for none; raises
    :class:`FieldError` (a :class:`GangKeyError` once the gang's name is known)."""
    name = key_value(podkeys.GANG, labels)
    pod_group = key_value(podkeys.POD_GROUP_X_K8S, labels)
    problem = annotations.get(GANG_ERROR)
    if problem is not None:  # "<field>: <reason>", as the workload's rule wrote it
        field, _, reason = problem.partition(": ")
        raise GangKeyError(field, reason or "unusable", name or None)
    if name is None and pod_group is None:
        spelled = [n for n in podkeys.GANG_MIN.names if n in labels]
        if spelled:
            raise FieldError(key_path(podkeys.GANG_MIN, spelled[0]), "set without a gang name")
        return None
    gang = name if name is not None else pod_group
    try:
        return _declared(name, pod_group, labels, annotations)
    except FieldError as err:
        raise GangKeyError(err.field, err.message, gang or None) from None


def _declared(
    name: str | None,
    pod_group: str | None,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> GangLabels:
    for key, value in ((podkeys.GANG, name), (podkeys.POD_GROUP_X_K8S, pod_group)):
        if value == "":
            raise FieldError(written_path(key, labels), "must not be empty")
    if name is not None and pod_group is not None and name != pod_group:
        raise FieldError(
            written_path(podkeys.GANG, labels),
            f"pod names two pod groups: {name!r} and "
            f"{podkeys.POD_GROUP_X_K8S.canonical}={pod_group!r}",
        )
    if name is None:
        source = "x-k8s"
    else:
        source = "topos" if podkeys.GANG.canonical in labels else "kubenexus"
    # The count is named in the spelling the pod uses (or would use, when it is missing).
    min_names = [n for n in podkeys.GANG_MIN.names if n in labels]
    min_field = key_path(
        podkeys.GANG_MIN,
        min_names[0] if min_names else podkeys.GANG_MIN.names[source == "kubenexus"],
    )
    min_text = key_value(podkeys.GANG_MIN, labels)
    min_member: int | None = None
    if min_text is not None:
        try:
            min_member = member_count(min_text)
        except ValueError as exc:
            raise FieldError(min_field, str(exc)) from None
    elif pod_group is None:
        raise FieldError(min_field, f"pod group {name!r} has no member count: add this label")
    timeout_text = key_value(podkeys.GANG_TIMEOUT, annotations)
    timeout_s: float | None = None
    if timeout_text is not None:
        try:
            timeout_s = parse_duration(timeout_text)
        except DurationError as exc:
            raise FieldError(written_path(podkeys.GANG_TIMEOUT, annotations), str(exc)) from None
    return GangLabels(name if name is not None else str(pod_group), min_member, timeout_s, source)
