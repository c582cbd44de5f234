"""Workload-level keys: what a pod inherits from its controller (Job, Deployment, StatefulSet…).

Seed manifests put ``topology.scheduler/*`` keys on the Job or Deployment, not on its pod
template. :func:`inheritance` says what to write on a pending pod so that it carries them:

- every pod-facing annotation key of :mod:`common.podkeys` (canonical or alias spelling) the pod
  does not write itself is copied from the owner, in the owner's spelling (messages then name the
  key the user wrote); the names copied are listed in ``topos.io/inherited``, so a later change
  on the owner replaces (or removes) them, while keys the pod writes itself always win;
- a workload that declares a pod group on its own metadata (:mod:`.ownergang`: ``topos.io/gang``,
  KubeNexus' name or ``scheduling.x-k8s.io/pod-group``, and ``topos.io/gang-min``, as labels or
  annotations) gives its pods that group's labels: the name, and the minimum (the owner's, else
  its pod count; none for a PodGroup object's group); a group key there that cannot be used
  gives them ``topos.io/gang-error`` naming the key and value instead (the pods wait with it);
- a workload whose keys ask for a placement (strategy, preferred domain, GPU count, bandwidth,
  latency) and declares no group becomes one pod group: ``topos.io/gang=<owner name>`` and
  ``topos.io/gang-min=<its pod count>`` (or the owner's ``gang-min``);
- the group labels (and error) written are listed in ``topos.io/inherited`` too (Topos's mark:
  they follow the owner while the pod is pending, and go when the owner stops declaring or
  asking), unless the pod declares a group of its own — a group label the pod carries
  unmarked is the user's and wins, whatever it is named. Pods labelled before the mark existed
  carry ``topos.io/gang=<owner name>`` unmarked: they are told apart by the owner's pod template
  (no group label there: the labels are Topos's and are marked now; a group label there: the
  user's, and a ``topos.io/gang-min`` the old rule overwrote gets the template's value back).
  The gang step then places all its pods at once, by the strategy (a workload of one pod too, so
  its preferred domain is tried first);
- a JobSet's, LeaderWorkerSet's or RayCluster's pod is a member of its workload's gang
  (:mod:`.workloadgangs`) whatever keys it carries: ``topos.io/gang``, ``topos.io/gang-min`` and
  ``topos.io/gang-run`` (which run of the gang), or, when the workload's keys are unusable,
  ``topos.io/gang-error`` naming the key and value (the pod then waits with that message) —
  unless the pod declares a group of its own.

Pure: the adapter (``coordinator.adapters.kube.owners``) patches the result onto the pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from common import podkeys
from common.labels import name_label_value
from coordinator.core.podspec.gangkeys import GANG_ERROR, GANG_RUN
from coordinator.core.podspec.ownergang import OwnerGangError, owner_gang
from coordinator.core.podspec.workloadgangs import WorkloadGang, WorkloadGangError

__all__ = [
    "INHERITED",
    "INHERITED_KEYS",
    "PLACEMENT_KEYS",
    "Inheritance",
    "Owner",
    "inheritance",
]

#: Annotation naming the keys a pod got from its owner (comma-separated), written with them.
INHERITED: Final = "topos.io/inherited"

#: The annotation keys a workload passes on to its pods.
INHERITED_KEYS: Final[tuple[podkeys.Key, ...]] = (
    podkeys.PLACEMENT,
    podkeys.PREFERRED_DOMAIN,
    podkeys.GPU_COUNT,
    podkeys.NETWORK_BANDWIDTH,
    podkeys.LATENCY_SENSITIVE,
    podkeys.GPU_LOCALITY,
    podkeys.GPU_MEMORY_MIN,
    podkeys.MIG_PROFILE,
    podkeys.NUMA_POLICY,
    podkeys.NUMA_RESOURCES,
    podkeys.GANG_TIMEOUT,
    podkeys.MIN_RUNTIME,
    podkeys.PREEMPTION_DELAY,
    podkeys.EXPECTED_DURATION,
    podkeys.GPU_FRACTION,
    podkeys.GPU_MEMORY,
    podkeys.SLICE_SIZE,
    podkeys.SLICE_TOPOLOGY,
    podkeys.GANG_TOPOLOGY,
)

#: Keys that make a workload one pod group (placed as a unit).
PLACEMENT_KEYS: Final = podkeys.PLACEMENT_KEYS

_GANG_LABELS: Final = (*podkeys.GANG.names, *podkeys.POD_GROUP_X_K8S.names)
#: The group labels Topos writes on a workload's pods; those written are listed in ``INHERITED``.
_GANG_MARKS: Final = (
    podkeys.GANG.canonical,
    podkeys.GANG_MIN.canonical,
    podkeys.POD_GROUP_X_K8S.canonical,
)


@dataclass(frozen=True, slots=True)
class Owner:
    """A pod's controller as the owner cache resolved it (a ReplicaSet's Deployment merged in)."""

    kind: str  # "Job", "Deployment", "ReplicaSet", "StatefulSet", …
    name: str
    annotations: Mapping[str, str] = field(default_factory=dict)  # nearest owner first
    pods: int = 1  # the group's minimum by default (a Job's parallelism; 1 for replicas)
    #: The labels of the pod template its pods are made from (the nearest owner's): what the user
    #: wrote, which the pod's labels started as.
    template_labels: Mapping[str, str] = field(default_factory=dict)
    #: The owner's own labels (nearest owner first), where a pod group may be declared too.
    labels: Mapping[str, str] = field(default_factory=dict)
    namespace: str = ""
    #: How many pods it runs at once (a Job's parallelism, a Deployment's replicas): the largest
    #: minimum its group can meet; ``None``: ``pods``.
    most: int | None = None

    @property
    def where(self) -> str:
        """The owner as messages name it: ``Job ml/train``."""
        return f"{self.kind} {self.namespace or 'default'}/{self.name}"


@dataclass(frozen=True, slots=True)
class Inheritance:
    """A merge patch for a pod's metadata (``None`` values delete)."""

    annotations: Mapping[str, str | None]
    labels: Mapping[str, str | None]

    def patch(self) -> dict[str, object]:
        meta: dict[str, object] = {}
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        if self.labels:
            meta["labels"] = dict(self.labels)
        return {"metadata": meta}


def inheritance(
    annotations: Mapping[str, str],
    labels: Mapping[str, str],
    owner: Owner | None,
    *,
    has_scheduling_group: bool = False,
    workload_pod: bool = False,
    workload_gang: WorkloadGang | WorkloadGangError | None = None,
) -> Inheritance | None:
    """What the pod (its ``annotations`` and ``labels``) must gain from ``owner``; ``None`` when
    it carries all of it already. ``workload_pod``: the pod is a JobSet's, LeaderWorkerSet's or
    RayCluster's, whose gang (``None``: none, the workload opted out) is ``workload_gang``."""
    if owner is None:
        owner = Owner(kind="", name="")
    before = {n for n in annotations.get(INHERITED, "").split(",") if n}
    own = {k: v for k, v in annotations.items() if k not in before and k != INHERITED}
    wanted: dict[str, str] = {}
    for key in INHERITED_KEYS:
        if any(name in own for name in key.names):
            continue  # the pod's own spelling wins
        for name in key.names:
            value = owner.annotations.get(name)
            if value is not None:
                wanted[name] = value
    marks = _workload(
        annotations, labels, before, has_scheduling_group, workload_pod, workload_gang
    )
    error: dict[str, str | None] = {}
    written: list[str] = []
    if marks is None:
        marked = before & set(_GANG_MARKS)
        merged = {**own, **wanted}
        label_patch, written, problem = _gang(
            labels, merged, owner, has_scheduling_group, marked, workload_pod
        )
        if problem is not None:
            wanted[GANG_ERROR] = problem
    else:
        label_patch, error = marks
    patch: dict[str, str | None] = {}
    for name in before - set(wanted) - set(_GANG_MARKS):
        if name in annotations:
            patch[name] = None
    for name, value in wanted.items():
        if annotations.get(name) != value:
            patch[name] = value
    listed = ",".join(sorted({*wanted, *written}))
    if patch or annotations.get(INHERITED, "") != listed:
        patch[INHERITED] = listed or None
    patch.update(error)
    if not patch and not label_patch:
        return None
    return Inheritance(annotations=patch, labels=label_patch)


def _gang(
    labels: Mapping[str, str],
    merged: Mapping[str, str],
    owner: Owner,
    has_scheduling_group: bool,
    marked: set[str],
    workload_pod: bool,
) -> tuple[dict[str, str | None], list[str], str | None]:
    """The label changes for the owner's group, the group labels that are Topos's once they are
    made (``marked``: those listed in ``INHERITED`` now), and why the owner's group keys cannot
    be used (``None``: they can)."""
    group = name_label_value(owner.name)
    ours = bool(marked) or (
        labels.get(podkeys.GANG.canonical) == group  # the rule before the mark wrote this …
        and not any(n in owner.template_labels for n in _GANG_LABELS)  # … the user did not
    )
    if not ours and any(n in labels for n in _GANG_LABELS):
        return _restored(labels, owner, group), [], None  # the pod names its own group
    # Labels that only look like Topos's (the owner's name, unmarked: written before the mark,
    # or by whoever made the pod) are followed when the owner asks for a group, never removed.
    want, problem = _owner_group(merged, owner, has_scheduling_group, workload_pod)
    patch: dict[str, str | None] = {k: v for k, v in want.items() if labels.get(k) != v}
    # No group of Topos's making (any more), or another one: the marked labels go.
    patch.update({k: None for k in sorted(marked) if k not in want and k in labels})
    return patch, sorted(want), problem


def _owner_group(
    merged: Mapping[str, str], owner: Owner, has_scheduling_group: bool, workload_pod: bool
) -> tuple[dict[str, str], str | None]:
    """The group labels the owner's pods get: the group its metadata declares
    (:mod:`.ownergang`), else one named after it when its keys ask for a placement; and the
    error its group keys make (the pods then wait with it)."""
    if not owner.name or has_scheduling_group:
        return {}, None
    if any(k.canonical in merged for k in (podkeys.POD_GROUP_VOLCANO, podkeys.POD_GROUP_KAI)):
        return {}, None  # … a Volcano or KAI PodGroup
    group = name_label_value(owner.name)
    placed = any(n in merged for k in PLACEMENT_KEYS for n in k.names)
    declared = None
    if not workload_pod:  # (a JobSet's, LWS's, RayCluster's gang keys are its own rule's)
        most = owner.pods if owner.most is None else owner.most
        declared = owner_gang(
            owner.where, owner.labels, owner.annotations, most=most, placed=placed
        )
    if isinstance(declared, OwnerGangError):
        return {podkeys.GANG.canonical: declared.gang or group}, declared.text
    if declared is not None and declared.key is not None:
        want = {declared.key.canonical: declared.name}
        count = declared.min_member
        if count is None and declared.key is podkeys.GANG:
            count = owner.pods
        if count is not None:
            want[podkeys.GANG_MIN.canonical] = str(count)
        return want, None
    if not placed:
        return {}, None
    count = owner.pods if declared is None else (declared.min_member or owner.pods)
    return {podkeys.GANG.canonical: group, podkeys.GANG_MIN.canonical: str(count)}, None


def _restored(labels: Mapping[str, str], owner: Owner, group: str) -> dict[str, str | None]:
    """The user's ``topos.io/gang-min`` back, on a pod whose template names its group after the
    owner and whose minimum the rule before the mark overwrote with the owner's pod count."""
    name = podkeys.GANG_MIN.canonical
    if labels.get(podkeys.GANG.canonical) != group:
        return {}
    written = owner.template_labels.get(name)
    return {} if labels.get(name) == written else {name: written}


_MARKS: Final = (podkeys.GANG.canonical, podkeys.GANG_MIN.canonical, GANG_RUN)


def _workload(
    annotations: Mapping[str, str],
    labels: Mapping[str, str],
    before: set[str],
    has_scheduling_group: bool,
    workload_pod: bool,
    gang: WorkloadGang | WorkloadGangError | None,
) -> tuple[dict[str, str | None], dict[str, str | None]] | None:
    """The label and annotation changes for a workload controller's gang; ``None``: the rule
    does not apply (no such workload, or the pod names its own group)."""
    # (a ``GANG_ERROR`` listed in ``INHERITED`` is the owner's group keys': not this rule's)
    ours = GANG_RUN in labels or (GANG_ERROR in annotations and GANG_ERROR not in before)
    names_own = has_scheduling_group or any(n in labels for n in _GANG_LABELS)
    if not ours and (names_own or not workload_pod or gang is None):
        return None
    wanted: dict[str, str | None] = dict.fromkeys(_MARKS)
    error: str | None = None
    if not has_scheduling_group and isinstance(gang, WorkloadGang):
        wanted = {
            podkeys.GANG.canonical: gang.name,
            podkeys.GANG_MIN.canonical: str(gang.min_member),
            GANG_RUN: gang.run,
        }
    elif not has_scheduling_group and isinstance(gang, WorkloadGangError):
        wanted[podkeys.GANG.canonical] = gang.gang
        error = gang.text
    # (no gang, or a group of the pod's own: the marks are taken away)
    label_patch = {k: v for k, v in wanted.items() if labels.get(k) != v}
    error_patch: dict[str, str | None] = {}
    if annotations.get(GANG_ERROR) != error:
        error_patch[GANG_ERROR] = error
    return label_patch, error_patch
