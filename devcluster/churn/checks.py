"""The invariants, read from the API server's objects alone (pods, nodes, events).

Each check takes the lists the API server returned and gives back :class:`Violation`s that name
what a person needs to look at: the round, the kind, the pod, the node, the GPU UUID.

- ``double-assigned``: a GPU UUID in ``topos.io/assigned-gpus`` of two live pods on one node;
- ``overcommitted``: the GPUs requested by a node's live bound pods exceed its allocatable;
- ``partial-gang``: a gang with some but fewer than ``topos.io/gang-min`` members bound;
- ``unassigned-gpus``: a bound GPU pod whose assigned UUIDs are missing or not as many as it asks;
- ``unknown-gpu``: an assigned UUID the node's published topology does not have;
- ``no-such-node``: a pod bound to a node the API server has no Node object for;
- ``numa-split``: a ``single-numa`` pod whose GPUs sit on more than one NUMA node;
- ``unexplained``: a pod neither bound nor given a reason (``PodScheduled=False`` or a
  ``FailedScheduling`` Event about its UID) within the settle time;
- ``vanished``: a pod the harness created and did not delete is gone, or another pod has its
  name (something deleted a pod it was not asked to: the playground's kubelet deleting by name a
  pod re-created under a terminating pod's name did);
- ``non-leader-bind`` (two coordinators): a bind reported by a coordinator that did not hold the
  Lease.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from common.model import NodeTopology, topology_from_json
from common.podkeys import ASSIGNED_GPUS, GPU_RESOURCE

KubeObject = Mapping[str, Any]
GANG_LABEL = "topos.io/gang"
GANG_MIN_LABEL = "topos.io/gang-min"
NUMA_POLICY = "topos.io/numa-policy"
TOPOLOGY_ANNOTATION = "topos.io/topology"


@dataclass(frozen=True, slots=True)
class Violation:
    round: int
    kind: str
    pod: str = ""
    node: str = ""
    uuid: str = ""
    detail: str = ""

    def __str__(self) -> str:
        parts = (("pod", self.pod), ("node", self.node), ("uuid", self.uuid))
        where = ", ".join(f"{k} {v}" for k, v in parts if v)
        return f"round {self.round}: {self.kind}: {where}{' — ' if where else ''}{self.detail}"


def name(obj: KubeObject) -> str:
    return str(obj["metadata"]["name"])


def uid(obj: KubeObject) -> str:
    return str(obj["metadata"].get("uid", ""))


def node_of(pod: KubeObject) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def is_live(pod: KubeObject) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return not pod["metadata"].get("deletionTimestamp") and phase not in ("Succeeded", "Failed")


def gpus_requested(pod: KubeObject) -> int:
    """``nvidia.com/gpu`` the pod asks for (a limit alone is the request, as in Kubernetes)."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or ():
        res = container.get("resources") or {}
        value = (res.get("requests") or {}).get(GPU_RESOURCE) or (res.get("limits") or {}).get(
            GPU_RESOURCE
        )
        total += int(value or 0)
    return total


def assigned(pod: KubeObject) -> list[str]:
    ann = pod["metadata"].get("annotations") or {}
    return [g for g in str(ann.get(ASSIGNED_GPUS, "")).split(",") if g]


def has_reason(pod: KubeObject, explained_uids: Iterable[str] = ()) -> bool:
    """Bound, or told why not: a ``PodScheduled=False`` condition or a ``FailedScheduling``
    Event about this pod's UID (an Event about a deleted pod of the same name does not count)."""
    if node_of(pod):
        return True
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return True
    return uid(pod) in set(explained_uids)


def topologies(nodes: Sequence[KubeObject]) -> dict[str, NodeTopology | None]:
    out: dict[str, NodeTopology | None] = {}
    for node in nodes:
        text = (node["metadata"].get("annotations") or {}).get(TOPOLOGY_ANNOTATION)
        try:
            out[name(node)] = topology_from_json(text) if text else None
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
            out[name(node)] = None
    return out


def check_state(
    round_: int, pods: Sequence[KubeObject], nodes: Sequence[KubeObject]
) -> list[Violation]:
    """Every invariant about what is bound, on the API server's pods and nodes of one moment."""
    found: list[Violation] = []
    live = [p for p in pods if is_live(p)]
    bound = [p for p in live if node_of(p)]
    node_objs = {name(n): n for n in nodes}
    topo = topologies(nodes)
    holders: dict[tuple[str, str], list[str]] = defaultdict(list)
    requested: dict[str, int] = defaultdict(int)
    for pod in bound:
        node, want, uuids = node_of(pod), gpus_requested(pod), assigned(pod)
        requested[node] += want
        if node not in node_objs:
            found.append(Violation(round_, "no-such-node", name(pod), node))
            continue
        for u in uuids:
            holders[(node, u)].append(name(pod))
        if want and len(uuids) != want:
            found.append(
                Violation(
                    round_,
                    "unassigned-gpus",
                    name(pod),
                    node,
                    detail=f"asks for {want} GPUs, {len(uuids)} assigned ({','.join(uuids)})",
                )
            )
        layout = topo.get(node)
        if layout is None:
            continue
        numa: set[int] = set()
        for u in uuids:
            gpu = layout.gpu_by_uuid(u)
            if gpu is None:
                found.append(Violation(round_, "unknown-gpu", name(pod), node, u))
            elif gpu.numa_node is not None:
                numa.add(gpu.numa_node)
        ann = pod["metadata"].get("annotations") or {}
        if ann.get(NUMA_POLICY) == "single-numa" and len(numa) > 1:
            found.append(
                Violation(
                    round_, "numa-split", name(pod), node, detail=f"GPUs on NUMA {sorted(numa)}"
                )
            )
    for (node, u), names in sorted(holders.items()):
        if len(names) > 1:
            found.append(
                Violation(
                    round_,
                    "double-assigned",
                    names[0],
                    node,
                    u,
                    detail=f"also assigned to {', '.join(names[1:])}",
                )
            )
    for node, want in sorted(requested.items()):
        if node not in node_objs:
            continue
        alloc = int(
            ((node_objs[node].get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, 0)
        )
        if want > alloc:
            on = sorted(name(p) for p in bound if node_of(p) == node)
            found.append(
                Violation(
                    round_,
                    "overcommitted",
                    node=node,
                    detail=f"{want} GPUs requested by bound pods, {alloc} allocatable "
                    f"({', '.join(on)})",
                )
            )
    found += partial_gangs(round_, live)
    return found


def vanished(
    round_: int, created: Mapping[str, str], pods: Sequence[KubeObject]
) -> list[Violation]:
    """Pods created (``created``: UID by name) and not deleted by the harness that the API
    server no longer has under that UID."""
    present = {name(p): uid(p) for p in pods}
    found = []
    for pod, want in sorted(created.items()):
        have = present.get(pod)
        if have != want:
            detail = (
                f"uid {want[:8]} is gone, no pod of that name"
                if have is None
                else f"uid {want[:8]} is gone, the name now has uid {have[:8]}"
            )
            found.append(Violation(round_, "vanished", pod, detail=detail))
    return found


def partial_gangs(round_: int, live: Sequence[KubeObject]) -> list[Violation]:
    gangs: dict[str, list[KubeObject]] = defaultdict(list)
    for pod in live:
        gang = (pod["metadata"].get("labels") or {}).get(GANG_LABEL)
        if gang:
            gangs[gang].append(pod)
    found = []
    for gang, members in sorted(gangs.items()):
        want = max(int((p["metadata"]["labels"]).get(GANG_MIN_LABEL, "1")) for p in members)
        on = sorted(name(p) for p in members if node_of(p))
        if 0 < len(on) < want:
            found.append(
                Violation(
                    round_,
                    "partial-gang",
                    ", ".join(on),
                    detail=f"gang {gang}: {len(on)} of min {want} members bound "
                    f"({len(members)} live)",
                )
            )
    return found


def summary(violations: Sequence[Violation]) -> dict[str, int]:
    """Violations counted by kind."""
    counts: dict[str, int] = defaultdict(int)
    for v in violations:
        counts[v.kind] += 1
    return dict(sorted(counts.items()))


def report(violations: Sequence[Violation], *, seed: int, limit: int = 40) -> str:
    lines = [f"{len(violations)} violation(s) with seed {seed}: {summary(violations)}"]
    lines += [f"  {v}" for v in violations[:limit]]
    if len(violations) > limit:
        lines.append(f"  … and {len(violations) - limit} more")
    return "\n".join(lines)
