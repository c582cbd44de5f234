"""Which gang (pod group) a pod belongs to, from any of the gang vocabularies.

1. Topos: labels ``topos.io/gang`` (group name) and ``topos.io/gang-min`` (members that must be
   placed together), annotation ``topos.io/gang-timeout`` (a duration: ``300``, ``90s``, ``5m``,
   ``1h30m``; docs/scheduling.md, "Durations").
2. KubeNexus: labels ``pod-group.scheduling.kubenexus.io/name`` and ``…/min-available`` — read as
   aliases of the Topos labels, so a pod may carry either spelling (or both, if they agree).
3. scheduler-plugins: label ``scheduling.x-k8s.io/pod-group`` naming a ``PodGroup`` object
   (``scheduling.x-k8s.io/v1alpha1``) in the pod's namespace; its ``spec.minMember`` and
   ``spec.scheduleTimeoutSeconds`` apply. Until that object exists the pod waits, with a message
   saying so.
4. Kubernetes' Workload API (``scheduling.k8s.io/v1alpha2``, alpha in 1.36): the pod spec field
   ``spec.schedulingGroup.podGroupName`` naming a standalone ``PodGroup`` of that API in the pod's
   namespace; its ``spec.schedulingPolicy.gang.minCount`` is the size (a ``basic`` policy: no
   gang, each pod alone), and its ``spec.schedulingConstraints.topology[0].key`` (a node label
   key) the level the whole gang stays inside (:attr:`GangSpec.topology`, the same as
   ``topos.io/gang-topology``, which wins where a member writes it). The glue keeps these objects
   in the same mapping as the scheduler-plugins ones, under :func:`workload_group_key`. Until the
   object exists the pod waits.
5. Volcano and KAI: annotations ``scheduling.k8s.io/group-name`` / ``pod-group-name`` naming their
   ``PodGroup`` objects (``scheduling.volcano.sh/v1beta1`` / ``scheduling.run.ai/v2alpha2``), kept
   in the same mapping under :func:`~coordinator.core.gangs.foreigngroups.foreign_group_key` and
   read by :mod:`coordinator.core.gangs.foreigngroups`. Until the object exists the pod waits.

The pod's keys are read by the pod parser (:mod:`coordinator.core.podspec.gangkeys`), so a gang
label means here what it means to :func:`~coordinator.core.podspec.parse.parse_pod`; this module
adds what a gang is: its key, the PodGroup object, the source it came from. A key names one *run*
of a gang (:func:`gang_instance_of`): the name plus the UID of the workload behind it.

:func:`gang_of` is pure: it takes the pod as the API returns it (a dict) and the PodGroup objects
the glue has seen, and returns a :class:`GangSpec`, ``None`` for a pod in no gang, or a
:class:`GangProblem` explaining what is wrong. NeuroNetes' ``AgentPool`` gang settings
(``spec.scheduling.gangScheduling``) map onto the same spec with :func:`gang_of_agent_pool`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from common.labels import is_label_key
from coordinator.core.gangs.foreigngroups import KINDS, foreign_group_key, min_member
from coordinator.core.podspec.durations import DurationError, parse_duration
from coordinator.core.podspec.fields import FieldError
from coordinator.core.podspec.gangkeys import (
    GANG_RUN,
    GangKeyError,
    member_count,
    pod_gang_labels,
)
from coordinator.core.podspec.workloadgangs import JOBSET_RESTART_ATTEMPT, JOBSET_UID

DEFAULT_TIMEOUT_S: Final = 300.0


@dataclass(frozen=True, slots=True, order=True)
class GangKey:
    """One run of a gang: its name, and the UID of the workload that made it (the PodGroup
    object, the pods' controller; empty for bare pods). A re-run under the same name is a new
    workload, hence a new key: it starts from nothing (see :func:`gang_instance_of`)."""

    namespace: str
    name: str
    uid: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class GangSpec:
    """A gang as one of its pods declares it."""

    key: GangKey
    min_member: int
    timeout_s: float | None = None  # None: the manager's default
    source: str  # "topos" | "kubenexus" | "podgroup" | "workload" | "volcano" | "kai"
    #              | "agentpool" | "pod"
    #: The node label key the whole gang stays inside (one domain of it), from a Workload-API
    #: PodGroup's ``spec.schedulingConstraints.topology``; None: none asked there.
    topology: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GangProblem:
    """Why a pod's gang cannot be used yet.

    ``waiting`` is True when nothing is wrong with the pod but something it names is missing (a
    PodGroup object not created yet): the pod stays pending and the message says why. Otherwise
    the pod's own labels are wrong and it cannot be scheduled until they are fixed.
    """

    message: str
    waiting: bool = False
    key: GangKey | None = None


def _namespace(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return ns if isinstance(ns, str) and ns else "default"


def _count(value: object, *, what: str) -> int | str:
    """A member count, or an error message naming ``what``."""
    try:
        return member_count(value)
    except ValueError as exc:
        return f"{what}: {exc}"


def gang_of(
    pod: Mapping[str, Any],
    podgroups: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> GangSpec | GangProblem | None:
    """The gang a pod declares, ``None`` for a pod in no gang, or what is wrong.

    ``podgroups`` maps ``(namespace, name)`` to scheduler-plugins ``PodGroup`` objects as dicts,
    and :func:`workload_group_key` to Workload-API ``PodGroup`` objects.
    """
    namespace = _namespace(pod)
    try:
        declared = pod_gang_labels(pod)
    except GangKeyError as bad:
        key = GangKey(namespace, bad.gang) if bad.gang else None
        return GangProblem(message=f"invalid {bad.field}: {bad.message}", key=key)
    except FieldError as bad:
        return GangProblem(message=f"invalid {bad.field.lstrip('.')}: {bad.message}")
    if declared is None:
        return None
    key = GangKey(namespace, declared.name)
    if declared.source == "workload":
        return _from_workload_group(key, podgroups, declared.timeout_s)
    if declared.source in KINDS:
        return _from_foreign_group(declared.source, key, podgroups, declared.timeout_s)
    if declared.min_member is None:  # the size is the PodGroup object's
        return _from_podgroup(key, podgroups, declared.timeout_s)
    return GangSpec(
        key=key,
        min_member=declared.min_member,
        timeout_s=declared.timeout_s,
        source=declared.source,
    )


def _from_podgroup(
    key: GangKey,
    podgroups: Mapping[tuple[str, str], Mapping[str, Any]] | None,
    pod_timeout_s: float | None,
) -> GangSpec | GangProblem:
    obj = (podgroups or {}).get((key.namespace, key.name))
    if obj is None:
        return GangProblem(
            message=f"waiting for PodGroup {key} (scheduling.x-k8s.io) named by label "
            "scheduling.x-k8s.io/pod-group: it does not exist yet",
            waiting=True,
            key=key,
        )
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if not isinstance(spec, Mapping):
        spec = {}
    n = _count(spec.get("minMember"), what=f"PodGroup {key} spec.minMember")
    if isinstance(n, str):
        return GangProblem(message=n, key=key)
    timeout = pod_timeout_s  # the object's timeout wins over the pod's annotation
    raw = spec.get("scheduleTimeoutSeconds")
    if raw is not None:
        what = f"PodGroup {key} spec.scheduleTimeoutSeconds={raw!r}"
        if isinstance(raw, bool) or not isinstance(raw, int):
            return GangProblem(message=f"{what}: expected seconds", key=key)
        if raw <= 0:
            return GangProblem(message=f"{what}: must be positive", key=key)
        try:
            timeout = parse_duration(str(raw))
        except DurationError as exc:
            return GangProblem(message=f"{what}: {exc}", key=key)
    return GangSpec(key=key, min_member=n, timeout_s=timeout, source="podgroup")


# --- the Workload API (scheduling.k8s.io/v1alpha2) ------------------------------------------------

#: Where Workload-API PodGroups sit in the ``podgroups`` mapping: Kubernetes names hold no ``/``,
#: so these keys never meet a scheduler-plugins PodGroup's ``(namespace, name)``.
WORKLOAD_GROUP_PREFIX: Final = "scheduling.k8s.io/"


def workload_group_key(namespace: str, name: str) -> tuple[str, str]:
    """The ``podgroups`` key of the Workload-API ``PodGroup`` ``namespace/name``."""
    return (namespace, WORKLOAD_GROUP_PREFIX + name)


def _from_workload_group(
    key: GangKey,
    podgroups: Mapping[tuple[str, str], Mapping[str, Any]] | None,
    timeout_s: float | None,
) -> GangSpec | GangProblem | None:
    obj = (podgroups or {}).get(workload_group_key(key.namespace, key.name))
    if obj is None:
        return GangProblem(
            message=f"waiting for PodGroup {key} (scheduling.k8s.io/v1alpha2) named by "
            "spec.schedulingGroup.podGroupName: it does not exist yet",
            waiting=True,
            key=key,
        )
    spec = obj.get("spec")
    policy = spec.get("schedulingPolicy") if isinstance(spec, Mapping) else None
    gang = policy.get("gang") if isinstance(policy, Mapping) else None
    if not isinstance(gang, Mapping):
        if isinstance(policy, Mapping) and "basic" in policy:
            return None  # the basic policy: every pod is scheduled on its own
        return GangProblem(
            message=f"PodGroup {key} (scheduling.k8s.io/v1alpha2) has no "
            "spec.schedulingPolicy.gang or .basic",
            key=key,
        )
    n = _count(gang.get("minCount"), what=f"PodGroup {key} spec.schedulingPolicy.gang.minCount")
    if isinstance(n, str):
        return GangProblem(message=n, key=key)
    topology = _topology(key, spec if isinstance(spec, Mapping) else {})
    if isinstance(topology, GangProblem):
        return topology
    return GangSpec(
        key=key, min_member=n, timeout_s=timeout_s, source="workload", topology=topology
    )


#: Where a Workload-API PodGroup names the level its gang stays inside (k8s.io/api v0.36.3
#: scheduling/v1alpha2 ``PodGroupSchedulingConstraints``: at most one ``TopologyConstraint``,
#: whose ``key`` is a node label key; kube-scheduler's TopologyPlacement plugin reads it).
TOPOLOGY_FIELD: Final = "spec.schedulingConstraints.topology"


def topology_field(key: GangKey) -> str:
    """How messages name the topology key of the Workload-API PodGroup ``key``."""
    return f"PodGroup {key} (scheduling.k8s.io/v1alpha2) {TOPOLOGY_FIELD}[0].key"


def _topology(key: GangKey, spec: Mapping[str, Any]) -> str | GangProblem | None:
    """The label key of the PodGroup's topology constraint, ``None`` for none, or what is wrong
    with it (the field and the value named)."""
    constraints = spec.get("schedulingConstraints")
    if constraints is None:
        return None
    where = f"PodGroup {key} (scheduling.k8s.io/v1alpha2)"
    if not isinstance(constraints, Mapping):
        return GangProblem(
            message=f"{where} spec.schedulingConstraints={constraints!r}: expected an object",
            key=key,
        )
    items = constraints.get("topology")
    if items is None or items == []:
        return None
    if not isinstance(items, list) or len(items) > 1:
        return GangProblem(
            message=f"{where} {TOPOLOGY_FIELD}={items!r}: expected a list of one constraint",
            key=key,
        )
    item = items[0]
    label = item.get("key") if isinstance(item, Mapping) else None
    if not isinstance(label, str) or not is_label_key(label):
        shown = label if isinstance(item, Mapping) else item
        return GangProblem(
            message=f"{where} {TOPOLOGY_FIELD}[0].key={shown!r}: not a node label key",
            key=key,
        )
    return label


def _from_foreign_group(
    source: str,
    key: GangKey,
    podgroups: Mapping[tuple[str, str], Mapping[str, Any]] | None,
    timeout_s: float | None,
) -> GangSpec | GangProblem:
    kind = KINDS[source]
    obj = (podgroups or {}).get(foreign_group_key(kind, key.namespace, key.name))
    if obj is None:
        return GangProblem(
            message=f"waiting for PodGroup {key} ({kind.api}) named by annotation "
            f"{kind.annotation}: it does not exist yet",
            waiting=True,
            key=key,
        )
    n = min_member(kind, obj, f"PodGroup {key} ({kind.api})")
    if isinstance(n, str):
        return GangProblem(message=n, key=key)
    return GangSpec(key=key, min_member=n, timeout_s=timeout_s, source=source)


# --- runs of a gang -------------------------------------------------------------------------------
# JobSet labels each pod with its JobSet's UID (JOBSET_UID): a JobSet's child Jobs are one
# workload; and with the restart attempt its Jobs were made for (JOBSET_RESTART_ATTEMPT): each
# attempt is a run of its own.


def workload_owner(pod: Mapping[str, Any]) -> tuple[str, str]:
    """The UID and kind of the workload a pod belongs to: its JobSet (label; kind ``JobSet``),
    else its controller (``ownerReferences`` with ``controller: true``, else the first owner);
    ``("", "")`` for a bare pod."""
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping):
        return "", ""
    labels = meta.get("labels")
    if isinstance(labels, Mapping):
        jobset = labels.get(JOBSET_UID)
        if isinstance(jobset, str) and jobset:
            return jobset, "JobSet"
    owners = meta.get("ownerReferences")
    if not isinstance(owners, list):
        return "", ""
    refs = [o for o in owners if isinstance(o, Mapping) and isinstance(o.get("uid"), str)]
    controllers = [o for o in refs if o.get("controller") is True]
    chosen = (controllers or refs)[:1]
    if not chosen:
        return "", ""
    kind = chosen[0].get("kind")
    return str(chosen[0]["uid"]), kind if isinstance(kind, str) else ""


def workload_uid(pod: Mapping[str, Any]) -> str:
    """The UID of the workload a pod belongs to (:func:`workload_owner`); empty for a bare pod."""
    return workload_owner(pod)[0]


#: Controllers whose pods are replicas that live on across rollouts and scale-ups, not runs: their
#: pods join a gang by its name, as bare pods do, so one gang may hold a bare driver and a
#: Deployment's executors (KubeNexus' Spark example).
REPLICA_CONTROLLERS: Final = frozenset({"ReplicaSet", "StatefulSet"})


def read_from_group(spec: GangSpec) -> bool:
    """Whether ``spec``'s size (and run) came from a group object — a scheduler-plugins or
    Workload-API PodGroup, a Volcano or KAI group — and so may change with it; otherwise the pod
    alone decides it."""
    return spec.source in ("podgroup", "workload") or spec.source in KINDS


def gang_instance_of(
    pod: Mapping[str, Any],
    podgroups: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> GangSpec | GangProblem | None:
    """:func:`gang_of`, with the key naming this run of the gang: the PodGroup object's UID for
    the scheduler-plugins vocabulary, else the pod's workload UID (:func:`workload_uid`). Two
    runs of one gang name (a Job deleted and applied again) are two gangs. A ReplicaSet's or
    StatefulSet's replicas are no run: their key is the name alone."""
    spec = gang_of(pod, podgroups)
    if not isinstance(spec, GangSpec):
        return spec
    uid = ""
    if spec.source in ("podgroup", "workload", *KINDS):
        where = (spec.key.namespace, spec.key.name)
        if spec.source == "workload":
            where = workload_group_key(*where)
        elif spec.source in KINDS:
            where = foreign_group_key(KINDS[spec.source], *where)
        obj = (podgroups or {}).get(where) or {}
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        raw = meta.get("uid") if isinstance(meta, Mapping) else None
        uid = raw if isinstance(raw, str) else ""
    elif spec.source == "pod":  # a pod of one: its own run, whatever else bears its name
        meta = pod.get("metadata")
        raw = meta.get("uid") if isinstance(meta, Mapping) else None
        uid = raw if isinstance(raw, str) else ""
    else:
        uid = _run_of(pod)
    if not uid:
        return spec
    return replace(spec, key=replace(spec.key, uid=uid))


def _run_of(pod: Mapping[str, Any]) -> str:
    """The run a pod of a labelled gang belongs to: ``topos.io/gang-run`` where Topos wrote it
    (a workload controller's gang, :mod:`coordinator.core.podspec.workloadgangs`), else its
    workload (a JobSet's restart attempt apart); empty for replicas and bare pods."""
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    labels = labels if isinstance(labels, Mapping) else {}
    run = labels.get(GANG_RUN)
    if isinstance(run, str) and run:
        return run
    uid, kind = workload_owner(pod)
    if kind in REPLICA_CONTROLLERS:
        return ""
    attempt = labels.get(JOBSET_RESTART_ATTEMPT)
    if kind == "JobSet" and isinstance(attempt, str) and attempt:
        return f"{uid}-{attempt}"
    return uid


def gang_of_agent_pool(pool: Mapping[str, Any]) -> GangSpec | GangProblem | None:
    """The gang a NeuroNetes ``AgentPool`` asks for (``spec.scheduling.gangScheduling``).

    The pool's pods are its replicas; the glue labels them ``topos.io/gang=<pool name>`` and
    ``topos.io/gang-min=<minMembers>`` from this spec. ``None`` when gang scheduling is off.
    """
    meta = pool.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, Mapping) else None
    spec = pool.get("spec") or {}
    scheduling = spec.get("scheduling") if isinstance(spec, Mapping) else None
    gang = scheduling.get("gangScheduling") if isinstance(scheduling, Mapping) else None
    if not isinstance(gang, Mapping) or gang.get("enabled") is not True:
        return None
    if not isinstance(name, str) or not name:
        return GangProblem(message="AgentPool has no metadata.name")
    key = GangKey(_namespace(pool), name)
    raw = gang.get("minMembers", spec.get("minReplicas"))
    n = _count(raw, what=f"AgentPool {key} gangScheduling.minMembers")
    if isinstance(n, str):
        return GangProblem(message=n, key=key)
    return GangSpec(key=key, min_member=n, source="agentpool")


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "GangKey",
    "GangProblem",
    "GangSpec",
    "gang_instance_of",
    "gang_of",
    "gang_of_agent_pool",
    "topology_field",
    "workload_group_key",
    "workload_owner",
    "workload_uid",
]
