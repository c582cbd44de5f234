"""The placement admission check: can a whole Kueue workload be placed now?

Kueue reserves quota for a workload, then waits for its admission checks. For the check Topos
answers (``controllerName: topos.io/placement``) the workload's pods are made from its podSets
(each pod template × count, one gang: all of them or none) and placed by the what-if
(:meth:`coordinator.engine.whatif.service.WhatIf.answer`) — the production decision path on a
copy of the live state, with room already nominated or reserved held. The answer:

- **Ready** — every pod fits now: the room is reserved for the workload's pods
  (:meth:`coordinator.engine.nominations.Nominations.reserve`), and Kueue is told, through the
  check's ``podSetUpdates``, to give each podset's pods the label ``topos.io/placement-group``
  (whose reservation they use, and whose nodes they try first) and the annotation
  ``topos.io/placement-nodes`` (where the check placed each pod; a restarted coordinator reserves
  again from it);
- **Pending** — not all fit now; the message says why in the scheduler's own words ("waiting for
  pod group …: 3/4 members placed; …", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu"),
  and the check is asked again as the cluster changes;
- **Rejected** — the workload can never be read (a pod template Topos cannot parse, a malformed
  Topos key): the message names the podset and the key;
- **Retry** — said Ready, but the room is lost before its pods are bound (:func:`room_lost`: a
  node it was held on deleted, cordoned, not Ready or its agent silent) or they were not all bound
  within the check's deadline (the controller's): Kueue evicts the workload, releases its quota and
  queues it again, and the check is asked anew.

Ready and Pending messages begin with what the user applied — the Workload's controller, as
``JobSet team-a/train``, not the ``jobset-train-<hash>`` Workload Kueue made — and the gang
(``kueue-<workload>``) follows as detail (:func:`applied`).

The pods are the pods the workload's controller will make: the Topos keys written on the
controller itself (a JobSet's or Job's annotations, a JobSet's replicatedJob template's; the
adapter finds the object, :class:`ControllerKeys`) are inherited as its pods inherit them
(:func:`~coordinator.core.podspec.inherit.inheritance`: a key the template writes wins), so the
check places them by the same strategy, policy and share, and a malformed key there is Rejected
before any pod exists, not left to fail each pod after admission.

Pods that are not Topos's (another ``schedulerName``) are not checked: such a podset is Ready
with a message saying so. Scheduling gates in a template are ignored (they are lifted before the
pods are scheduled).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from common.podkeys import SCHEDULER_NAME
from coordinator.core.podspec.inherit import INHERITED, Owner, inheritance
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.engine.nominations import PLACEMENT_GROUP, Nominated, Nominations
from coordinator.engine.whatif.service import WhatIf, WhatIfError

__all__ = [
    "CONTROLLER_NAME",
    "PLACEMENT_GROUP",
    "PLACEMENT_NODES",
    "ControllerKeys",
    "Verdict",
    "controller_keys",
    "decide",
    "reserve_from_updates",
    "room_lost",
    "workload_pods",
]

CONTROLLER_NAME: Final = "topos.io/placement"
PLACEMENT_NODES: Final = "topos.io/placement-nodes"
GANG: Final = "topos.io/gang"
GANG_MIN: Final = "topos.io/gang-min"
MAX_MESSAGE: Final = 1024  # a Workload's check message is shown by kubectl; keep it short


class WorkloadError(ValueError):
    """A Workload whose podSets cannot be made into pods; the message names podset and key."""


@dataclass(frozen=True, slots=True)
class Verdict:
    state: str  # Ready | Pending | Rejected
    message: str
    #: podset name → the node of each of its pods, in index order (Ready only)
    nodes: Mapping[str, Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ControllerKeys:
    """The annotations a workload's controller passes on to its pods: ``annotations`` to every
    podset's, ``podsets`` (podset name → annotations) on top for one podset's."""

    kind: str
    name: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    podsets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def owner(self, podset: str) -> Owner:
        merged = {**self.annotations, **self.podsets.get(podset, {})}
        return Owner(kind=self.kind, name=self.name, annotations=merged)


def controller(workload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference of ``workload``'s controller (the object the user applied)."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("kind"):
            return ref
    return None


def controller_keys(obj: Mapping[str, Any]) -> ControllerKeys:
    """What ``obj`` (a Workload's controller: Job, JobSet, LeaderWorkerSet, RayCluster…) passes
    on to its pods: its annotations, and for a JobSet each replicatedJob's Job template's on top
    (that Job's own annotations, nearer to its pods), keyed by the replicatedJob's name, which is
    its podset's."""
    meta = obj.get("metadata") or {}
    podsets: dict[str, Mapping[str, str]] = {}
    if obj.get("kind") == "JobSet":
        for job in (obj.get("spec") or {}).get("replicatedJobs") or ():
            if not isinstance(job, Mapping):
                continue
            written = ((job.get("template") or {}).get("metadata") or {}).get("annotations")
            if isinstance(written, Mapping) and written:
                podsets[str(job.get("name"))] = {str(k): str(v) for k, v in written.items()}
    annotations = meta.get("annotations") or {}
    return ControllerKeys(
        kind=str(obj.get("kind") or ""),
        name=str(meta.get("name") or ""),
        annotations={str(k): str(v) for k, v in annotations.items()},
        podsets=podsets,
    )


def group_of(workload: Mapping[str, Any]) -> str:
    meta = workload.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def applied(workload: Mapping[str, Any]) -> str:
    """What the user applied, as the check's message names it: the Workload's controller
    (``JobSet team-a/train``), or the Workload itself where none is known."""
    meta = workload.get("metadata") or {}
    namespace = meta.get("namespace", "")
    ref = controller(workload)
    if ref is not None and ref.get("name"):
        return f"{ref['kind']} {namespace}/{ref['name']}"
    return f"Workload {namespace}/{meta.get('name', '')}"


def workload_pods(
    workload: Mapping[str, Any], keys: ControllerKeys | None = None
) -> list[dict[str, Any]]:
    """The pods of ``workload``'s podSets (template × count), one gang of all of them, with the
    keys their controller passes on (``keys``) as they will carry them."""
    meta = workload.get("metadata") or {}
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    podsets = (workload.get("spec") or {}).get("podSets")
    if not isinstance(podsets, list) or not podsets:
        raise WorkloadError(f"Workload {namespace}/{name}: spec.podSets is empty")
    total = 0
    for podset in podsets:
        count = podset.get("count") if isinstance(podset, Mapping) else None
        if not isinstance(count, int) or count < 0:
            raise WorkloadError(f"Workload {namespace}/{name}: podSets count {count!r}")
        total += count
    pods: list[dict[str, Any]] = []
    for podset in podsets:
        template = podset.get("template")
        if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
            raise WorkloadError(
                f"Workload {namespace}/{name}: podSets[{podset.get('name')}].template has no spec"
            )
        podset_name = str(podset.get("name", "main"))
        written = dict((template.get("metadata") or {}).get("annotations") or {})
        annotations = _inherited(written, keys.owner(podset_name)) if keys else written
        for i in range(int(podset["count"])):
            labels = dict((template.get("metadata") or {}).get("labels") or {})
            if GANG not in labels and total > 1:
                labels.update({GANG: f"kueue-{name}", GANG_MIN: str(total)})
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{name}-{podset_name}-{i}",
                        "namespace": namespace,
                        "uid": f"{meta.get('uid', name)}-{podset_name}-{i}",
                        "labels": labels,
                        "annotations": dict(annotations),
                    },
                    "spec": _ungated(template["spec"]),
                }
            )
    return pods


def _inherited(annotations: Mapping[str, str], owner: Owner) -> dict[str, str]:
    """``annotations`` with the keys ``owner`` passes on, as the pod will carry them (its group
    labels are the check's own: every pod of the workload is one gang)."""
    made = inheritance(annotations, {}, owner)
    out = dict(annotations)
    for key, value in (made.annotations if made is not None else {}).items():
        if key == INHERITED:
            continue
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _refused(
    pod: Mapping[str, Any],
    error: PodSpecError,
    workload: Mapping[str, Any],
    keys: ControllerKeys | None,
) -> str:
    """Why ``pod`` cannot be read, naming where the key is written: its template, or the
    controller it inherits the key from."""
    name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
    if keys is not None:
        bare = next(p for p in workload_pods(workload) if p["metadata"]["name"] == name)
        if not isinstance(parse_pod(bare), PodSpecError):
            return f"{keys.kind} {namespace}/{keys.name}, inherited by its pods: {error.text}"
    return f"pod template of {name}: {error.text}"


def _ungated(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The pod spec as it will be scheduled: its scheduling gates (another controller's, or
    Kueue's own ``kueue.x-k8s.io/topology``) are lifted before it is, so the check ignores them."""
    out = copy.deepcopy(dict(spec))
    out.pop("schedulingGates", None)
    return out


def _podset_of(pod_name: str, workload: str, podsets: Sequence[str]) -> tuple[str, int] | None:
    for podset in podsets:
        prefix = f"{workload}-{podset}-"
        if pod_name.startswith(prefix) and pod_name[len(prefix) :].isdigit():
            return podset, int(pod_name[len(prefix) :])
    return None


def decide(
    whatif: WhatIf, workload: Mapping[str, Any], keys: ControllerKeys | None = None
) -> Verdict:
    """Whether every pod of ``workload`` fits now, where, or why not (nothing is held here);
    ``keys``: what its controller passes on to its pods."""
    try:
        pods = workload_pods(workload, keys)
    except WorkloadError as exc:
        return Verdict("Rejected", str(exc))
    for pod in pods:
        request = parse_pod(pod)
        if isinstance(request, PodSpecError):
            return Verdict("Rejected", _refused(pod, request, workload, keys)[:MAX_MESSAGE])
    ours = [p for p in pods if p["spec"].get("schedulerName") == SCHEDULER_NAME]
    if not ours:
        return Verdict("Ready", f"no pod says schedulerName: {SCHEDULER_NAME}; nothing to place")
    try:
        answer = whatif.answer(ours, suggest=False, budget_s=0.0)
    except WhatIfError as exc:
        return Verdict("Rejected", str(exc)[:MAX_MESSAGE])
    name = str((workload.get("metadata") or {}).get("name", ""))
    names = [str(ps.get("name", "main")) for ps in (workload.get("spec") or {}).get("podSets", [])]
    subject = applied(workload)
    gang = ours[0]["metadata"]["labels"].get(GANG)
    detail = f" (gang {gang})" if gang else ""
    if not answer.fits:
        why = "; ".join(u.message for u in answer.units if not u.fits)
        said = f"{subject}: cannot place all {len(ours)} pods now: {why}"  # why names the gang
        return Verdict("Pending", said[:MAX_MESSAGE])
    where: dict[str, list[str]] = {n: [] for n in names}
    for unit in answer.units:
        for placement in unit.placements:
            found = _podset_of(placement.pod.partition("/")[2], name, names)
            if found is not None:
                where[found[0]].append(placement.node)
    counts: dict[str, int] = {}
    for nodes in where.values():
        for node in nodes:
            counts[node] = counts.get(node, 0) + 1
    spread = ", ".join(f"{n} ×{c}" for n, c in sorted(counts.items()))
    return Verdict(
        "Ready",
        f"{subject}: all {len(ours)} pods fit now{detail}, room held: {spread}"[:MAX_MESSAGE],
        {k: v for k, v in where.items() if v},
    )


def room_lost(snapshot: Snapshot, held: Sequence[Nominated]) -> str | None:
    """Why the room ``held`` (a reservation's entries not yet taken) is gone, or ``None``: a node
    it is on was deleted, cordoned, is not Ready, or its agent went silent."""
    pods: dict[str, int] = {}
    for entry in held:
        pods[entry.node] = pods.get(entry.node, 0) + 1
    for name in sorted(pods):
        node = snapshot.get(name)
        if node is None:
            why = "was deleted"
        elif node.unschedulable:
            why = "is cordoned"
        elif not node.ready:
            why = "is not Ready"
        elif node.stale:
            why = "has a silent agent (no new placements)"
        else:
            continue
        count = pods[name]
        return f"node {name} {why} ({count} pod{'s were' if count > 1 else ' was'} to go there)"
    return None


def reserve(
    nominations: Nominations,
    workload: Mapping[str, Any],
    verdict: Verdict,
    keys: ControllerKeys | None = None,
) -> None:
    """Hold the room ``verdict`` found for ``workload``'s pods."""
    nominations.reserve(group_of(workload), _entries(workload, verdict.nodes, {}, keys))


def reserve_from_updates(
    nominations: Nominations,
    workload: Mapping[str, Any],
    nodes: Mapping[str, Sequence[str]],
    bound: Mapping[str, int],
    keys: ControllerKeys | None = None,
) -> None:
    """After a restart: hold again what ``nodes`` (from the check's podSetUpdates) says, but
    for the pods already bound (``bound``: node → pods of the group bound there)."""
    nominations.reserve(group_of(workload), _entries(workload, nodes, bound, keys))


def _entries(
    workload: Mapping[str, Any],
    nodes: Mapping[str, Sequence[str]],
    bound: Mapping[str, int],
    keys: ControllerKeys | None,
) -> list[tuple[PodRequest, str]]:
    left = dict(bound)
    requests: dict[str, PodRequest] = {}
    for pod in workload_pods(workload, keys):
        parsed = parse_pod(pod)
        if isinstance(parsed, PodRequest):
            requests.setdefault(pod["metadata"]["name"].rsplit("-", 1)[0], parsed)
    name = str((workload.get("metadata") or {}).get("name", ""))
    out: list[tuple[PodRequest, str]] = []
    for podset, placed in nodes.items():
        request = requests.get(f"{name}-{podset}")
        if request is None:
            continue
        for node in placed:
            if left.get(node, 0) > 0:
                left[node] -= 1
                continue
            out.append((request, node))
    return out


def pod_set_updates(workload: Mapping[str, Any], verdict: Verdict) -> list[dict[str, Any]]:
    """What Kueue writes into each podset's pod template once admitted."""
    group = str((workload.get("metadata") or {}).get("name", ""))
    return [
        {
            "name": podset,
            "labels": {PLACEMENT_GROUP: group},
            "annotations": {PLACEMENT_NODES: ",".join(nodes)},
        }
        for podset, nodes in verdict.nodes.items()
    ]


def nodes_from_updates(check: Mapping[str, Any]) -> dict[str, list[str]]:
    """The nodes a Ready check placed each podset's pods on (its podSetUpdates)."""
    out: dict[str, list[str]] = {}
    for update in check.get("podSetUpdates") or []:
        raw = (update.get("annotations") or {}).get(PLACEMENT_NODES, "")
        if raw:
            out[str(update.get("name"))] = [n for n in str(raw).split(",") if n]
    return out
