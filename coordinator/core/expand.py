"""The pods a workload would make, before anything is applied: what-if's first step.

:func:`expand` takes the documents a user would ``kubectl apply`` and returns the Pods their
controllers would create, labelled as those controllers label them (read from their Go sources):

- ``Pod`` (``v1``): itself.
- ``Job`` (``batch/v1``): ``min(parallelism, completions)`` pods of ``spec.template`` (parallelism
  defaults to 1), named ``<job>-<index>``, with the Job controller's labels (``job-name``,
  ``controller-uid``, and for ``completionMode: Indexed`` the completion index label and
  annotation), and the keys the pod inherits from its Job
  (:func:`~coordinator.core.podspec.inherit.inheritance`: a Job asking for a placement, or
  declaring a pod group on its own labels or annotations, becomes one pod group, as the kube
  adapter makes it).
- ``JobSet`` (``jobset.x-k8s.io/v1alpha2``, JobSet v0.10.1): for every replicated job, ``replicas``
  child Jobs ``<jobset>-<replicatedJob>-<jobIndex>``, each expanded as a Job; its pods carry the
  labels and annotations the JobSet controller puts on the Job's pod template
  (``jobset.sigs.k8s.io/jobset-name``, ``…/jobset-uid``, ``…/replicatedjob-name``,
  ``…/replicatedjob-replicas``, ``…/job-index``, ``…/job-global-index``, ``…/global-replicas``,
  ``…/group-name``, ``…/group-replicas``, ``…/job-group-index``, ``…/restart-attempt``).
  JobSet's webhook defaults ``completionMode`` to ``Indexed``. Its pods carry the JobSet's gang
  (:func:`~coordinator.core.podspec.workloadgangs.jobset_gang`), as the kube adapter writes it.
- ``LeaderWorkerSet`` (``leaderworkerset.x-k8s.io/v1``, LWS v0.7.0): ``replicas`` groups of
  ``size`` pods: the leader ``<lws>-<group>`` (``leaderTemplate``, else ``workerTemplate``) and
  the workers ``<lws>-<group>-<i>``, with ``leaderworkerset.sigs.k8s.io/name``, ``…/group-index``,
  ``…/worker-index``, ``…/group-key`` and the ``…/size`` (and workers' ``…/leader-name``)
  annotations, and their group's gang (:func:`~coordinator.core.podspec.workloadgangs.lws_gang`).
- ``PodGroup`` (``scheduling.x-k8s.io/v1alpha1``, or the Workload API's
  ``scheduling.k8s.io/v1alpha2``): no pods; the group its member pods (other documents) name.
- ``List`` (``v1``): its items.
- any kind in ``extra`` (the coordinator passes NeuroNetes' ``AgentPool``).

Anything else, or a field that cannot be read, raises :class:`ExpandError` naming the document,
the key and the value. Pure: no I/O.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from coordinator.core.gangs.identity import workload_group_key
from coordinator.core.podspec.inherit import Owner, inheritance
from coordinator.core.podspec.workloadgangs import (
    WorkloadGang,
    WorkloadGangError,
    jobset_gang,
    lws_gang,
)

__all__ = [
    "MAX_PODS",
    "ExpandError",
    "Expander",
    "Expansion",
    "Workload",
    "expand",
]

#: The most pods one what-if may expand to.
MAX_PODS: Final = 2000

#: Another kind's pods: the document in, the Pods out (raises :class:`ExpandError` or
#: ``ValueError`` naming what is wrong).
Expander = Callable[[Mapping[str, Any]], list[dict[str, Any]]]

JOB_API: Final = "batch/v1"
JOBSET_API: Final = "jobset.x-k8s.io/v1alpha2"
LWS_API: Final = "leaderworkerset.x-k8s.io/v1"
PODGROUP_APIS: Final = ("scheduling.x-k8s.io/v1alpha1", "scheduling.k8s.io/v1alpha2")

_JOBSET: Final = "jobset.sigs.k8s.io/"
_LWS: Final = "leaderworkerset.sigs.k8s.io/"


class ExpandError(ValueError):
    """A document that cannot be expanded: ``where`` (``Job train`` or ``documents[2]``), the
    ``key`` (a field path), and what is wrong with its value."""

    def __init__(self, where: str, key: str, message: str) -> None:
        super().__init__(f"{where}: {key}: {message}")
        self.where = where
        self.key = key


@dataclass(frozen=True, slots=True)
class Workload:
    """One document and the pods it expanded to (``namespace/name`` keys, in order)."""

    kind: str
    namespace: str
    name: str
    pods: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Expansion:
    pods: tuple[dict[str, Any], ...] = ()
    #: PodGroups given, keyed as the gang runtime keys them (``(namespace, name)``; Workload-API
    #: groups by :func:`~coordinator.core.gangs.identity.workload_group_key`).
    podgroups: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    workloads: tuple[Workload, ...] = ()


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _mapping(doc: Mapping[str, Any], path: str, where: str, *, required: bool) -> dict[str, Any]:
    value: object = doc
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        wanted = (
            "is required (a mapping)" if value is None else f"must be a mapping, not {_show(value)}"
        )
        raise ExpandError(where, path, wanted)
    return dict(value)


def _count(doc: Mapping[str, Any], path: str, where: str, *, default: int, minimum: int = 0) -> int:
    value: object = doc
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ExpandError(
            where, path, f"must be a whole number of at least {minimum}, not {_show(value)}"
        )
    return value


def _meta(doc: Mapping[str, Any], where: str) -> tuple[str, str]:
    meta = _mapping(doc, "metadata", where, required=True)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        generate = meta.get("generateName")
        if isinstance(generate, str) and generate:
            name = generate.rstrip("-") or generate
        else:
            raise ExpandError(where, "metadata.name", f"is required, got {_show(name)}")
    namespace = meta.get("namespace")
    if namespace is None:
        namespace = "default"
    if not isinstance(namespace, str) or not namespace:
        raise ExpandError(where, "metadata.namespace", f"must be a name, not {_show(namespace)}")
    return namespace, name


def _uid(kind: str, namespace: str, name: str) -> str:
    """A stand-in UID for an object not yet created (what-if objects have none)."""
    digest = hashlib.sha1(f"{kind}/{namespace}/{name}".encode()).hexdigest()
    return f"whatif-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _pod(
    template: Mapping[str, Any],
    *,
    namespace: str,
    name: str,
    labels: Mapping[str, str] = {},
    annotations: Mapping[str, str] = {},
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    meta = dict(template.get("metadata") or {})
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    out_meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": _uid("Pod", namespace, name),
        "labels": {**dict(meta.get("labels") or {}), **labels},
        "annotations": {**dict(meta.get("annotations") or {}), **annotations},
    }
    if owner is not None:
        out_meta["ownerReferences"] = [dict(owner)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": out_meta, "spec": spec}


def _template(doc: Mapping[str, Any], path: str, where: str) -> dict[str, Any]:
    template = _mapping(doc, path, where, required=True)
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        raise ExpandError(where, f"{path}.spec", f"is required (a mapping), got {_show(spec)}")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ExpandError(
            where,
            f"{path}.spec.containers",
            f"must list at least one container, got {_show(containers)}",
        )
    for key in ("labels", "annotations"):
        raw = (template.get("metadata") or {}).get(key)
        if raw is not None and (
            not isinstance(raw, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items())
        ):
            raise ExpandError(
                where, f"{path}.metadata.{key}", f"must map strings to strings, not {_show(raw)}"
            )
    return template


#: A workload controller's pod → its gang (:mod:`~coordinator.core.podspec.workloadgangs`).
GangOf = Callable[[Mapping[str, Any]], WorkloadGang | WorkloadGangError | None]


def _inherit(
    pod: dict[str, Any], owner: Owner | None, gang_of: GangOf | None = None
) -> dict[str, Any]:
    """``pod`` with what it inherits from its Job and, a JobSet's or LeaderWorkerSet's pod, its
    workload's gang (the kube adapter patches the same: ``adapters/kube/owners.py``)."""
    meta = pod["metadata"]
    patch = inheritance(
        meta["annotations"],
        meta["labels"],
        owner,
        has_scheduling_group=bool(pod["spec"].get("schedulingGroup")),
        workload_pod=gang_of is not None,
        workload_gang=gang_of(pod) if gang_of is not None else None,
    )
    if patch is None:
        return pod
    for target, changes in (("annotations", patch.annotations), ("labels", patch.labels)):
        for key, value in changes.items():
            if value is None:
                meta[target].pop(key, None)
            else:
                meta[target][key] = value
    return pod


def _job_pods(
    job: Mapping[str, Any],
    where: str,
    *,
    namespace: str,
    name: str,
    template_labels: Mapping[str, str] = {},
    template_annotations: Mapping[str, str] = {},
    default_mode: str = "NonIndexed",
    gang_of: GangOf | None = None,
) -> list[dict[str, Any]]:
    template = _template(job, "spec.template", where)
    parallelism = _count(job, "spec.parallelism", where, default=1)
    completions = job.get("spec", {}).get("completions")
    n = parallelism
    if completions is not None:
        n = min(parallelism, _count(job, "spec.completions", where, default=1))
    mode = job.get("spec", {}).get("completionMode") or default_mode
    if mode not in ("Indexed", "NonIndexed"):
        raise ExpandError(
            where, "spec.completionMode", f"must be Indexed or NonIndexed, not {_show(mode)}"
        )
    uid = _uid("Job", namespace, name)
    controller = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }
    owner_ref = {
        "apiVersion": JOB_API,
        "kind": "Job",
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    job_annotations = dict((job.get("metadata") or {}).get("annotations") or {})
    written = dict((template.get("metadata") or {}).get("labels") or {})
    # The Job's own labels may declare its pod group; those its template carries too are the
    # template's (the API server gives a Job without labels its template's).
    job_labels = dict((job.get("metadata") or {}).get("labels") or {})
    owner = Owner(
        kind="Job",
        name=name,
        annotations=job_annotations,
        pods=n,
        template_labels=written,
        labels={k: str(v) for k, v in job_labels.items() if written.get(k) != v},
        namespace=namespace,
    )
    pods = []
    for i in range(n):
        labels = {**template_labels, **controller}
        annotations = dict(template_annotations)
        if mode == "Indexed":
            labels["batch.kubernetes.io/job-completion-index"] = str(i)
            annotations["batch.kubernetes.io/job-completion-index"] = str(i)
        pod = _pod(
            template,
            namespace=namespace,
            name=f"{name}-{i}",
            labels=labels,
            annotations=annotations,
            owner=owner_ref,
        )
        pods.append(_inherit(pod, owner, gang_of))
    return pods


def _jobset_pods(
    doc: Mapping[str, Any], where: str, namespace: str, name: str
) -> list[dict[str, Any]]:
    spec = _mapping(doc, "spec", where, required=True)
    jobs = spec.get("replicatedJobs")
    if not isinstance(jobs, list) or not jobs:
        raise ExpandError(
            where, "spec.replicatedJobs", f"must list at least one, got {_show(jobs)}"
        )
    rjobs: list[tuple[str, str, int, dict[str, Any]]] = []
    for i, raw in enumerate(jobs):
        path = f"spec.replicatedJobs[{i}]"
        if not isinstance(raw, Mapping):
            raise ExpandError(where, path, f"must be a mapping, not {_show(raw)}")
        rname = raw.get("name")
        if not isinstance(rname, str) or not rname:
            raise ExpandError(where, f"{path}.name", f"is required, got {_show(rname)}")
        group = raw.get("groupName") or "default"
        if not isinstance(group, str):
            raise ExpandError(where, f"{path}.groupName", f"must be a name, not {_show(group)}")
        replicas = _count(raw, "replicas", f"{where} {path}", default=1)
        rjobs.append(
            (rname, group, replicas, _mapping(raw, "template", f"{where} {path}", required=True))
        )
    uid = _uid("JobSet", namespace, name)
    with_uid = {**doc, "metadata": {**_mapping(doc, "metadata", where, required=True), "uid": uid}}
    # The JobSet's keys reach its pods behind their Job's, as the kube adapter passes them on.
    keys = _annotations(doc)
    total = sum(r for _, _, r, _ in rjobs)
    groups: dict[str, int] = {}
    for _, group, replicas, _ in rjobs:
        groups[group] = groups.get(group, 0) + replicas
    pods: list[dict[str, Any]] = []
    global_index = 0
    group_index: dict[str, int] = {}
    for rname, group, replicas, job in rjobs:
        for j in range(replicas):
            job_name = f"{name}-{rname}-{j}"
            marks = {
                _JOBSET + "jobset-name": name,
                _JOBSET + "jobset-uid": uid,
                _JOBSET + "replicatedjob-name": rname,
                _JOBSET + "restart-attempt": "0",
                _JOBSET + "replicatedjob-replicas": str(replicas),
                _JOBSET + "global-replicas": str(total),
                _JOBSET + "job-index": str(j),
                _JOBSET + "job-key": hashlib.sha1(f"{namespace}/{job_name}".encode()).hexdigest(),
                _JOBSET + "job-global-index": str(global_index + j),
                _JOBSET + "group-name": group,
                _JOBSET + "group-replicas": str(groups[group]),
                _JOBSET + "job-group-index": str(group_index.get(group, 0) + j),
            }
            job_meta = dict(job.get("metadata") or {})
            job_meta["annotations"] = {**keys, **(job_meta.get("annotations") or {})}
            pods += _job_pods(
                {**job, "metadata": job_meta},
                f"{where} replicatedJob {rname}",
                namespace=namespace,
                name=job_name,
                template_labels=marks,
                template_annotations=marks,
                default_mode="Indexed",
                gang_of=partial(jobset_gang, with_uid, replicated_job=rname, restart_attempt="0"),
            )
        global_index += replicas
        group_index[group] = group_index.get(group, 0) + replicas
    return pods


def _lws_pods(
    doc: Mapping[str, Any], where: str, namespace: str, name: str
) -> list[dict[str, Any]]:
    replicas = _count(doc, "spec.replicas", where, default=1)
    lwt = _mapping(doc, "spec.leaderWorkerTemplate", where, required=True)
    size = _count(doc, "spec.leaderWorkerTemplate.size", where, default=1, minimum=1)
    worker = _template(doc, "spec.leaderWorkerTemplate.workerTemplate", where)
    leader = (
        _template(doc, "spec.leaderWorkerTemplate.leaderTemplate", where)
        if lwt.get("leaderTemplate") is not None
        else worker
    )
    owner = Owner(kind="LeaderWorkerSet", name=name, annotations=_annotations(doc))
    pods: list[dict[str, Any]] = []
    for g in range(replicas):
        leader_name = f"{name}-{g}"
        key = hashlib.sha1(f"{namespace}/{leader_name}".encode()).hexdigest()
        common = {_LWS + "name": name, _LWS + "group-index": str(g), _LWS + "group-key": key}
        size_note = {_LWS + "size": str(size)}
        gang_of = partial(lws_gang, doc, leader_uid=_uid("Pod", namespace, leader_name))
        pods.append(
            _inherit(
                _pod(
                    leader,
                    namespace=namespace,
                    name=leader_name,
                    labels={**common, _LWS + "worker-index": "0"},
                    annotations=size_note,
                ),
                owner,
                gang_of,
            )
        )
        for w in range(1, size):
            worker_pod = _pod(
                worker,
                namespace=namespace,
                name=f"{leader_name}-{w}",
                labels={**common, _LWS + "worker-index": str(w)},
                annotations={**size_note, _LWS + "leader-name": leader_name},
            )
            pods.append(_inherit(worker_pod, owner, gang_of))
    return pods


def _annotations(doc: Mapping[str, Any]) -> dict[str, str]:
    meta = doc.get("metadata")
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, Mapping) else {}


def _bare_pod(doc: Mapping[str, Any], where: str, namespace: str, name: str) -> dict[str, Any]:
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        raise ExpandError(where, "spec", f"is required (a mapping), got {_show(spec)}")
    pod = _pod(doc, namespace=namespace, name=name)
    meta = dict(doc.get("metadata") or {})
    if isinstance(meta.get("uid"), str) and meta["uid"]:
        pod["metadata"]["uid"] = meta["uid"]
    if meta.get("ownerReferences"):
        pod["metadata"]["ownerReferences"] = meta["ownerReferences"]
    return pod


def expand(
    documents: Sequence[object],
    *,
    extra: Mapping[str, tuple[str, Expander]] | None = None,
    max_pods: int = MAX_PODS,
) -> Expansion:
    """The pods ``documents`` would make. ``extra`` maps a kind to ``(apiVersion, expander)``."""
    extra = extra or {}
    pods: list[dict[str, Any]] = []
    podgroups: dict[tuple[str, str], Mapping[str, Any]] = {}
    workloads: list[Workload] = []
    flat: list[tuple[str, object]] = []
    seen: set[str] = set()
    for i, doc in enumerate(documents):
        if isinstance(doc, Mapping) and doc.get("kind") == "List" and doc.get("apiVersion") == "v1":
            items = doc.get("items")
            if not isinstance(items, list):
                raise ExpandError(
                    f"documents[{i}] (List)", "items", f"must be a list, not {_show(items)}"
                )
            flat += [(f"documents[{i}].items[{j}]", item) for j, item in enumerate(items)]
        else:
            flat.append((f"documents[{i}]", doc))
    for where, doc in flat:
        if doc is None:
            continue  # an empty YAML document
        if not isinstance(doc, Mapping):
            raise ExpandError(where, "(document)", f"must be a mapping, not {_show(doc)}")
        kind, api = doc.get("kind"), doc.get("apiVersion")
        if not isinstance(kind, str) or not kind:
            raise ExpandError(where, "kind", f"is required, got {_show(kind)}")
        namespace, name = _meta(doc, where)
        here = f"{kind} {namespace}/{name}"
        made: list[dict[str, Any]]
        if kind == "Pod" and api == "v1":
            made = [_bare_pod(doc, here, namespace, name)]
        elif kind == "Job" and api == JOB_API:
            made = _job_pods(doc, here, namespace=namespace, name=name)
        elif kind == "JobSet" and api == JOBSET_API:
            made = _jobset_pods(doc, here, namespace, name)
        elif kind == "LeaderWorkerSet" and api == LWS_API:
            made = _lws_pods(doc, here, namespace, name)
        elif kind == "PodGroup" and api in PODGROUP_APIS:
            key = (
                (namespace, name)
                if api == PODGROUP_APIS[0]
                else workload_group_key(namespace, name)
            )
            podgroups[key] = doc
            continue
        elif kind in extra and api == extra[kind][0]:
            try:
                made = extra[kind][1](doc)
            except ExpandError:
                raise
            except ValueError as exc:
                raise ExpandError(here, "spec", str(exc)) from None
        else:
            known = [
                "v1 Pod",
                f"{JOB_API} Job",
                f"{JOBSET_API} JobSet",
                f"{LWS_API} LeaderWorkerSet",
            ]
            known += [f"{a} PodGroup" for a in PODGROUP_APIS]
            known += [f"{a} {k}" for k, (a, _) in sorted(extra.items())]
            raise ExpandError(
                where,
                "kind",
                f"cannot expand apiVersion {_show(api)} kind {_show(kind)} "
                f"(known: {', '.join(known)}, v1 List)",
            )
        pods += made
        if len(pods) > max_pods:
            raise ExpandError(here, "(pods)", f"the documents expand to more than {max_pods} pods")
        keys = tuple(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in made)
        for pod_key in keys:
            if pod_key in seen:
                raise ExpandError(here, "metadata.name", f"pod {pod_key} would be made twice")
            seen.add(pod_key)
        workloads.append(Workload(kind=kind, namespace=namespace, name=name, pods=keys))
    return Expansion(pods=tuple(pods), podgroups=podgroups, workloads=tuple(workloads))
