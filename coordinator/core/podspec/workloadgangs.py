"""Gangs without a PodGroup: which pods of a JobSet, a LeaderWorkerSet or a RayCluster must be
placed together, read from the objects and labels their controllers write.

- **JobSet** (``jobset.x-k8s.io/v1alpha2``, and Kubeflow Trainer's TrainJob, which runs as a
  JobSet of its own name): every pod of every replicated job is one gang — ``replicas`` × the
  Job's ``parallelism`` (capped by ``completions``) summed — unless the JobSet starts its
  replicated jobs one after the other: with ``startupPolicy.startupPolicyOrder: InOrder`` each
  replicated job is its own gang, in order (the controller creates the next only once the previous
  is ready); a replicated job with ``dependsOn`` is its own gang, with the others waiting on the
  same predecessor (the controller creates it only once that one is ready or complete). With
  exclusive placement by affinity (``alpha.jobset.sigs.k8s.io/exclusive-topology`` without
  ``…/node-selector``) JobSet's webhook refuses a Job's follower pods until its leader (completion
  index 0) is scheduled: the leaders are one gang (``<gang>-leaders``), the followers another
  (``<gang>-followers``). A run is the JobSet's UID and its
  ``jobset.sigs.k8s.io/restart-attempt``: the controller's restart (every Job recreated) is a new
  run.
- **LeaderWorkerSet** (``leaderworkerset.x-k8s.io/v1``): each group — its leader and its
  ``size - 1`` workers, pod labels ``leaderworkerset.sigs.k8s.io/name`` and ``…/group-index``,
  annotation ``…/size`` — is one gang; a run is the group's leader pod (the controller recreates a
  group by deleting its leader). Where the controller creates the workers only after the leader is
  scheduled (``…/exclusive-topology``) or ready (``startupPolicy: LeaderReady``), the leader is
  placed alone and the workers form the gang.
- **RayCluster** (``ray.io/v1``): the head plus each worker group's ``minReplicas`` ×
  ``numOfHosts`` (suspended groups left out) is one gang, as KubeRay's own gang integrations count
  it; every pod of the cluster belongs to it, so workers beyond that minimum (the autoscaler's)
  are placed one by one once the gang is bound. A run is the RayCluster's UID.

On the workload (labels or annotations), ``topos.io/gang-min`` sets the minimum (at most the
pods the gang has) and ``topos.io/gang-opt-out: "true"`` turns the rule off; the opt-out is read
on the pod too. Pure: :mod:`coordinator.adapters.kube.owners` finds the objects and writes the
result onto the pods (:func:`coordinator.core.podspec.inherit.inheritance`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from common import podkeys
from common.labels import name_label_value
from coordinator.core.podspec.gangkeys import member_count
from coordinator.core.podspec.slicekeys import (
    JOBSET_EXCLUSIVE,
    JOBSET_NODE_SELECTOR,
    LWS_EXCLUSIVE,
    LWS_SIZE,
)

__all__ = [
    "GANG_OPT_OUT",
    "JOBSET_NAME",
    "JOBSET_REPLICATED_JOB",
    "JOBSET_RESTART_ATTEMPT",
    "JOBSET_UID",
    "LWS_GROUP_INDEX",
    "LWS_NAME",
    "LWS_SIZE",
    "LWS_WORKER_INDEX",
    "RAY_CLUSTER",
    "WorkloadGang",
    "WorkloadGangError",
    "jobset_gang",
    "lws_gang",
    "opt_out",
    "raycluster_gang",
    "workload_digest",
]

#: On a workload or a pod: ``"true"`` makes it no gang by this module's rules.
GANG_OPT_OUT: Final = "topos.io/gang-opt-out"

# JobSet v0.10.1 (api/jobset/v1alpha2/jobset_types.go, pkg/constants/constants.go).
JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID: Final = "jobset.sigs.k8s.io/jobset-uid"
JOBSET_REPLICATED_JOB: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_RESTART_ATTEMPT: Final = "jobset.sigs.k8s.io/restart-attempt"
JOB_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
# LeaderWorkerSet v0.7.0 (api/leaderworkerset/v1/leaderworkerset_types.go).
LWS_NAME: Final = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX: Final = "leaderworkerset.sigs.k8s.io/worker-index"
# KubeRay v1.5.0 (ray-operator/controllers/ray/utils/constant.go).
RAY_CLUSTER: Final = "ray.io/cluster"


@dataclass(frozen=True, slots=True)
class WorkloadGang:
    """The gang a controller-made pod belongs to."""

    kind: str  # "JobSet" | "LeaderWorkerSet" | "RayCluster"
    workload: str  # the workload's name
    name: str  # the gang's name (a label value)
    min_member: int
    run: str  # which run of the gang (a label value)


@dataclass(frozen=True, slots=True)
class WorkloadGangError:
    """A key on the workload (or the pod) that makes its gang unusable; ``gang`` is its name."""

    gang: str
    field: str  # e.g. "JobSet ml/train metadata.labels[topos.io/gang-min]"
    message: str

    @property
    def text(self) -> str:
        return f"{self.field}: {self.message}"


Result = WorkloadGang | WorkloadGangError | None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _strs(meta: Mapping[str, Any], what: str) -> Mapping[str, str]:
    raw = meta.get(what)
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): str(v) for k, v in raw.items()}


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _where(kind: str, obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return f"{kind} {meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def opt_out(what: str, gang: str, *metas: Mapping[str, Any]) -> bool | WorkloadGangError:
    """Whether a workload's or pod's metadata says ``topos.io/gang-opt-out: "true"`` (label or
    annotation); a value other than ``true``/``false`` is an error naming ``what`` (the object)
    for the gang ``gang``."""
    for meta in metas:
        for part in ("labels", "annotations"):
            value = _strs(meta, part).get(GANG_OPT_OUT)
            if value is None:
                continue
            if value.strip().lower() == "true":
                return True
            if value.strip().lower() != "false":
                field = f"{what} metadata.{part}[{GANG_OPT_OUT}]"
                return WorkloadGangError(gang, field, f"expected 'true' or 'false', got {value!r}")
    return False


def _gang_min(
    kind: str, obj: Mapping[str, Any], gang: str, most: int
) -> int | WorkloadGangError | None:
    """``topos.io/gang-min`` on the workload (label, else annotation); more than ``most`` (the
    pods it ever runs at once) is refused, as on a Job: the group would wait for ever."""
    meta = _meta(obj)
    for part in ("labels", "annotations"):
        value = _strs(meta, part).get(podkeys.GANG_MIN.canonical)
        if value is None:
            continue
        field = f"{_where(kind, obj)} metadata.{part}[{podkeys.GANG_MIN.canonical}]"
        try:
            n = member_count(value)
        except ValueError as exc:
            return WorkloadGangError(gang, field, str(exc))
        if n > most:
            why = (
                f"the group would wait for ever: {_where(kind, obj)} runs at most {most} "
                f"pod(s) at once, got {value!r}"
            )
            return WorkloadGangError(gang, field, why)
        return n
    return None


def _opted_out(
    kind: str, obj: Mapping[str, Any], pod: Mapping[str, Any], gang: str
) -> bool | WorkloadGangError:
    out = opt_out(_where(kind, obj), gang, _meta(obj))
    return out if out is not False else opt_out("pod", gang, _meta(pod))


# --- JobSet ---------------------------------------------------------------------------------------


def _job_pods(rjob: Mapping[str, Any]) -> int:
    """Pods one replicated job starts together: replicas × parallelism (capped by completions)."""
    template = rjob.get("template")
    spec = _spec(template) if isinstance(template, Mapping) else {}
    parallelism = _int(spec.get("parallelism"), 1)
    completions = spec.get("completions")
    per_job = parallelism if completions is None else min(parallelism, _int(completions, 1))
    return max(0, _int(rjob.get("replicas"), 1)) * max(0, per_job)


def jobset_stages(spec: Mapping[str, Any]) -> list[list[Mapping[str, Any]]]:
    """The replicated jobs the controller starts together, in order: all of them, or one stage
    per replicated job (``InOrder``), or apart by ``dependsOn`` (those waiting on the same
    predecessor together, after the ones that wait on nothing)."""
    rjobs = [r for r in spec.get("replicatedJobs") or () if isinstance(r, Mapping)]
    policy = spec.get("startupPolicy")
    if isinstance(policy, Mapping) and policy.get("startupPolicyOrder") == "InOrder":
        return [[r] for r in rjobs]
    stages: dict[str, list[Mapping[str, Any]]] = {}
    for rjob in rjobs:
        deps = rjob.get("dependsOn")
        trigger = ""
        if isinstance(deps, list) and deps:
            trigger = ",".join(
                f"{d.get('name')}={d.get('status')}" for d in deps if isinstance(d, Mapping)
            )
        stages.setdefault(trigger, []).append(rjob)
    return list(stages.values())


def jobset_gang(
    jobset: Mapping[str, Any], pod: Mapping[str, Any], *, replicated_job: str, restart_attempt: str
) -> Result:
    """The gang of the JobSet's pod of ``replicated_job`` in its restart ``restart_attempt``."""
    meta = _meta(jobset)
    name = str(meta.get("name") or "")
    stages = jobset_stages(_spec(jobset))
    stage = next((s for s in stages if any(r.get("name") == replicated_job for r in s)), None)
    if stage is None:
        return None
    gang = name if len(stages) == 1 else f"{name}-{stage[0].get('name')}"
    size = sum(_job_pods(r) for r in stage)
    annotations = _strs(_meta(pod), "annotations")
    if JOBSET_EXCLUSIVE in annotations and JOBSET_NODE_SELECTOR not in annotations:
        jobs = sum(max(0, _int(r.get("replicas"), 1)) for r in stage)
        if annotations.get(JOB_COMPLETION_INDEX) == "0":
            gang, size = f"{gang}-leaders", jobs
        else:
            gang, size = f"{gang}-followers", size - jobs
    gang = name_label_value(gang)
    out = _opted_out("JobSet", jobset, pod, gang)
    if out is not False:
        return out if isinstance(out, WorkloadGangError) else None
    n = _gang_min("JobSet", jobset, gang, size)
    if isinstance(n, WorkloadGangError):
        return n
    if size < 2:
        return None
    run = name_label_value(f"{meta.get('uid') or ''}-{restart_attempt or '0'}")
    return WorkloadGang("JobSet", name, gang, size if n is None else n, run)


# --- LeaderWorkerSet ------------------------------------------------------------------------------


def lws_gang(lws: Mapping[str, Any], pod: Mapping[str, Any], *, leader_uid: str) -> Result:
    """The gang of an LWS pod: its group (leader + workers), or its group's workers alone where
    the controller creates them only after the leader is placed or ready."""
    meta = _meta(lws)
    name = str(meta.get("name") or "")
    pod_meta = _meta(pod)
    labels = _strs(pod_meta, "labels")
    annotations = _strs(pod_meta, "annotations")
    group = labels.get(LWS_GROUP_INDEX, "")
    gang = name_label_value(f"{name}-{group}")
    out = _opted_out("LeaderWorkerSet", lws, pod, gang)
    if out is not False:
        return out if isinstance(out, WorkloadGangError) else None
    raw_size: object = annotations.get(LWS_SIZE)
    field = f"pod metadata.annotations[{LWS_SIZE}]"
    if raw_size is None:  # the controller writes it on every pod; a hand-made pod may lack it
        template = _spec(lws).get("leaderWorkerTemplate")
        raw_size = template.get("size", 1) if isinstance(template, Mapping) else 1
        field = f"{_where('LeaderWorkerSet', lws)} spec.leaderWorkerTemplate.size"
    try:
        size = member_count(raw_size)
    except ValueError as exc:
        return WorkloadGangError(gang, field, str(exc))
    leader = labels.get(LWS_WORKER_INDEX, "0") == "0"
    after_leader = LWS_EXCLUSIVE in annotations or _spec(lws).get("startupPolicy") == "LeaderReady"
    if after_leader:
        if leader:
            return None  # the leader alone
        gang = name_label_value(f"{name}-{group}-workers")
        size -= 1
    n = _gang_min("LeaderWorkerSet", lws, gang, size)
    if isinstance(n, WorkloadGangError):
        return n
    if size < 2:
        return None  # a pod of its own
    return WorkloadGang("LeaderWorkerSet", name, gang, size if n is None else n, leader_uid)


# --- RayCluster -----------------------------------------------------------------------------------


def _ray_groups(spec: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    return [
        g
        for g in spec.get("workerGroupSpecs") or ()
        if isinstance(g, Mapping) and g.get("suspend") is not True
    ]


def raycluster_gang(cluster: Mapping[str, Any], pod: Mapping[str, Any]) -> Result:
    """The gang of a RayCluster's pod: the head plus each worker group's minimum."""
    meta = _meta(cluster)
    name = str(meta.get("name") or "")
    gang = name_label_value(name)
    out = _opted_out("RayCluster", cluster, pod, gang)
    if out is not False:
        return out if isinstance(out, WorkloadGangError) else None
    groups = _ray_groups(_spec(cluster))
    hosts = [max(1, _int(g.get("numOfHosts"), 1)) for g in groups]
    pairs = list(zip(groups, hosts, strict=True))
    least = 1 + sum(max(0, _int(g.get("minReplicas"), 0)) * h for g, h in pairs)
    # what it may ever run: the autoscaler may go up to maxReplicas
    most = 1 + sum(
        max(0, _int(g.get("replicas"), 0), _int(g.get("maxReplicas"), 0)) * h for g, h in pairs
    )
    n = _gang_min("RayCluster", cluster, gang, max(least, most))
    if isinstance(n, WorkloadGangError):
        return n
    size = least if n is None else n
    if size < 2:
        return None
    return WorkloadGang("RayCluster", name, gang, size, str(meta.get("uid") or ""))


def workload_digest(obj: Mapping[str, Any]) -> object:
    """What of a workload object its gang depends on (a change elsewhere — status, templates —
    changes no pod's gang)."""
    meta = _meta(obj)
    spec = _spec(obj)
    keys = (podkeys.GANG_MIN.canonical, GANG_OPT_OUT)
    marks = tuple(
        (part, k, _strs(meta, part).get(k)) for part in ("labels", "annotations") for k in keys
    )
    shape = (
        tuple(
            (r.get("name"), _job_pods(r), repr(r.get("dependsOn")))
            for r in spec.get("replicatedJobs") or ()
            if isinstance(r, Mapping)
        ),
        repr(spec.get("startupPolicy")),
        repr(spec.get("leaderWorkerTemplate", {}).get("size")),
        tuple(
            (g.get("minReplicas"), g.get("replicas"), g.get("numOfHosts"))
            for g in _ray_groups(spec)
        ),
    )
    return (meta.get("uid"), marks, shape)
