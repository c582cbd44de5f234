"""What the demo did, read back the way a user would: from the cluster's Pod objects (node,
``topos.io/assigned-*`` annotations, ``PodScheduled`` condition) and the coordinator's inventory
(the hardware the agents reported).

Per job: state, where its pods went, and why (link class of each pod's GPUs against the best
the node offers, NUMA nodes, MIG instances, the network span of a gang) — or why not (the
scheduler's own message). For the cluster: GPU and MIG utilisation, idle GPUs stranded on partly
used nodes (fragmentation), utilisation per leaf, and the locality achieved.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common import labels as L
from common import podkeys
from common.model import NodeTopology, worst_link
from coordinator.core.domains.summary import stranded_gpus
from coordinator.core.podspec.sharing import HeldShare, parse_held
from coordinator.demo.scenario import DemoJob
from coordinator.inventory.store import Inventory
from coordinator.sim.locality import best_link_rank, span

__all__ = ["DemoReport", "JobRow", "PodPlace", "build_report", "compress", "format_report"]


@dataclass(frozen=True, slots=True)
class PodPlace:
    """One pod as it stands."""

    name: str
    state: str  # running | finished | pending
    node: str = ""
    gpus: tuple[int, ...] = ()  # whole GPU indices
    mig: tuple[str, ...] = ()  # "1g.5gb on GPU 0"
    numa: tuple[int, ...] = ()
    link: str = ""  # worst link among the pod's GPUs: "NVSwitch", "NV4", "PIX", …
    best_link: bool | None = None  # on the best class the node offers (None: < 2 GPUs)
    message: str = ""  # why it is pending
    shared_gpu: int | None = None  # the GPU it holds part of (``topos.io/gpu-share``)
    share: HeldShare | None = None  # how much of it


@dataclass(frozen=True, slots=True)
class JobRow:
    job: DemoJob
    pods: tuple[PodPlace, ...]
    state: str  # running | finished | waiting | unschedulable | partly placed
    where: str
    why: str
    span: str = ""  # for gangs: node | leaf | spine | cluster

    @property
    def placed(self) -> int:
        return sum(1 for p in self.pods if p.state != "pending")


@dataclass(frozen=True, slots=True)
class LeafUse:
    leaf: str
    spine: str
    nodes: int
    gpus: int
    busy: int
    mig: int
    mig_busy: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoReport:
    rows: tuple[JobRow, ...]
    nodes: int
    gpus: int
    busy_gpus: int
    mig_instances: int
    busy_mig: int
    stranded: int  # idle whole GPUs on partly used nodes
    idle: int
    shared_gpus: int  # GPUs held in parts (busy: never free for a whole-GPU pod)
    share_pods: int  # running pods holding those parts
    multi_gpu_pods: int
    best_link_pods: int
    gangs: int
    gangs_one_leaf: int
    leaves: tuple[LeafUse, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "gpus": self.gpus,
            "busy_gpus": self.busy_gpus,
            "mig_instances": self.mig_instances,
            "busy_mig": self.busy_mig,
            "stranded_gpus": self.stranded,
            "idle_gpus": self.idle,
            "shared_gpus": self.shared_gpus,
            "share_pods": self.share_pods,
            "multi_gpu_pods": self.multi_gpu_pods,
            "best_link_pods": self.best_link_pods,
            "gangs": self.gangs,
            "gangs_one_leaf": self.gangs_one_leaf,
            "jobs": [
                {
                    "job": r.job.name,
                    "kind": r.job.kind,
                    "state": r.state,
                    "placed": r.placed,
                    "pods": len(r.pods),
                    "where": r.where,
                    "why": r.why,
                    "span": r.span,
                    "pod_places": [
                        {
                            "name": p.name,
                            "state": p.state,
                            "node": p.node,
                            "gpus": list(p.gpus),
                            "mig": list(p.mig),
                            "numa": list(p.numa),
                            "link": p.link,
                            "share": (
                                None
                                if p.share is None
                                else {
                                    "gpu": p.shared_gpu,
                                    "fraction": p.share.milli / 1000,
                                    "memory_mib": p.share.memory_mib,
                                }
                            ),
                            "message": p.message,
                        }
                        for p in r.pods
                    ],
                }
                for r in self.rows
            ],
        }


# --- reading pods ---------------------------------------------------------------------------------


def _condition_message(obj: Mapping[str, Any]) -> str:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message") or "")
    return ""


def _link_name(topology: NodeTopology, gpus: Sequence[int]) -> str:
    link = worst_link(topology, gpus)
    if link.is_nvlink:
        return "NVSwitch" if topology.nvswitch else str(link)
    return str(link)


def pod_place(obj: Mapping[str, Any], topologies: Mapping[str, NodeTopology]) -> PodPlace:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    name = str(meta.get("name", ""))
    node = str(spec.get("nodeName") or "")
    if not node:
        return PodPlace(name, "pending", message=_condition_message(obj))
    phase = (obj.get("status") or {}).get("phase")
    state = "finished" if phase in ("Succeeded", "Failed") else "running"
    ann = meta.get("annotations") or {}
    devices = [d for d in str(ann.get(podkeys.ASSIGNED_GPUS, "")).split(",") if d]
    numa = tuple(int(x) for x in str(ann.get(podkeys.ASSIGNED_NUMA, "")).split(",") if x.isdigit())
    topology = topologies.get(node)
    gpus: list[int] = []
    mig: list[str] = []
    if topology is not None:
        by_uuid = {g.uuid: g.index for g in topology.gpus}
        for dev in devices:
            if dev in by_uuid:
                gpus.append(by_uuid[dev])
                continue
            for g in topology.gpus:
                for inst in g.mig_instances:
                    if dev in (inst.uuid, f"{g.uuid}/gi{inst.gi_id}"):
                        mig.append(f"{inst.profile} on GPU {g.index}")
    held = parse_held(str(ann.get(podkeys.GPU_SHARE, "")))
    if held is not None and len(gpus) == 1:  # part of that GPU, not all of it
        return PodPlace(name, state, node, numa=numa, shared_gpu=gpus[0], share=held)
    link = ""
    best: bool | None = None
    if topology is not None and len(gpus) >= 2:
        link = _link_name(topology, gpus)
        best = worst_link(topology, gpus).rank <= best_link_rank(topology, len(gpus))
    return PodPlace(name, state, node, tuple(sorted(gpus)), tuple(mig), numa, link, best)


# --- summarising ----------------------------------------------------------------------------------


def compress(names: Iterable[str]) -> str:
    """``h100-01, h100-02, h100-03, h100-05`` → ``h100-01..03, h100-05``."""
    groups: list[tuple[str, int, int, int]] = []  # prefix, first, last, width
    plain: list[str] = []
    for name in sorted(set(names)):
        m = re.match(r"^(.*?)(\d+)$", name)
        if m is None:
            plain.append(name)
            continue
        prefix, num = m.group(1), int(m.group(2))
        if groups and groups[-1][0] == prefix and groups[-1][2] == num - 1:
            p, a, _, w = groups[-1]
            groups[-1] = (p, a, num, w)
        else:
            groups.append((prefix, num, num, len(m.group(2))))
    out = [f"{p}{a:0{w}d}" if a == b else f"{p}{a:0{w}d}..{b:0{w}d}" for p, a, b, w in groups]
    return ", ".join(out + plain)


def _why_pod(p: PodPlace) -> str:
    parts: list[str] = []
    if p.gpus:
        text = f"GPU {p.gpus[0]}" if len(p.gpus) == 1 else "GPUs " + ",".join(map(str, p.gpus))
        if p.link:
            text += f" {p.link}" + (" (best here)" if p.best_link else " (not the best here)")
        parts.append(text)
    if p.mig:
        parts.append("MIG " + ", ".join(p.mig))
    if p.share is not None and p.shared_gpu is not None:
        parts.append(p.share.of_gpu(p.shared_gpu))
    if p.numa and len(p.gpus) > 1:
        parts.append("NUMA " + ",".join(map(str, p.numa)))
    return "; ".join(parts)


def _why_pods(pods: Sequence[PodPlace], *, pinned: bool) -> str:
    """One line for several like pods: the GPU sets by link class, MIG profiles, NUMA."""
    parts: list[str] = []
    sets = Counter((len(p.gpus), p.link, p.best_link) for p in pods if p.gpus)
    for (n, link, best), count in sorted(sets.items(), key=lambda kv: -kv[1]):
        text = f"{count}× {n} GPU" + ("s" if n > 1 else "")
        if link:
            text += f" on {link}" + (" (best here)" if best else " (not the best here)")
        parts.append(text)
    migs = Counter(m.split(" on ")[0] for p in pods for m in p.mig)
    parts += [f"{count}× MIG {profile}" for profile, count in sorted(migs.items())]
    shares = Counter(p.share.milli for p in pods if p.share is not None)
    if shares:
        held = len({(p.node, p.shared_gpu) for p in pods if p.shared_gpu is not None})
        asks = " + ".join(f"{n}× {milli / 1000:g}" for milli, n in sorted(shares.items()))
        parts.append(f"{asks} of one GPU, sharing {held} GPU" + ("s" if held > 1 else ""))
    if pinned and all(len(p.numa) == 1 for p in pods):
        parts.append("each on one NUMA node (its CPUs, memory and GPUs)")
    nodes = len({p.node for p in pods})
    parts.append(f"{nodes} node" + ("s" if nodes > 1 else ""))
    return "; ".join(parts)


def _row(
    job: DemoJob,
    pods: Sequence[PodPlace],
    node_labels: Mapping[str, Mapping[str, str]],
) -> JobRow:
    placed = [p for p in pods if p.state != "pending"]
    pending = [p for p in pods if p.state == "pending"]
    if not placed:
        message = next((p.message for p in pending if p.message), "not tried yet")
        state = "waiting" if job.gang else "unschedulable"
        return JobRow(job, tuple(pods), state, "—", message)
    if pending:
        state = "partly placed"
    elif all(p.state == "finished" for p in placed):
        state = "finished"
    else:
        state = "running"
    nodes = [p.node for p in placed]
    where = compress(nodes)
    leaves = sorted({node_labels.get(n, {}).get(L.LEAF, "?") for n in nodes})
    job_span = ""
    if job.gang:
        job_span = span([node_labels.get(n, {}) for n in dict.fromkeys(nodes)])
        tier = {
            "node": f"one node ({leaves[0]})",
            "leaf": f"one leaf ({leaves[0]}), {len(set(nodes))} nodes",
            "spine": f"{len(leaves)} leaves of one spine ({', '.join(leaves)})",
            "cluster": f"{len(leaves)} leaves across spines",
        }[job_span]
        links = sorted({p.link for p in placed if p.link})
        why = f"gang whole in {tier}" + (f"; GPUs {'/'.join(links)}" if links else "")
    elif len(placed) == 1:
        where += f" ({leaves[0]})"
        why = _why_pod(placed[0])
    else:
        where += f" ({', '.join(leaves)})"
        annotations = job.pods[0].get("metadata", {}).get("annotations") or {}
        why = _why_pods(placed, pinned=podkeys.NUMA_POLICY.canonical in annotations)
    if pending:
        why += f"; {len(pending)} pending: {pending[0].message}"
    return JobRow(job, tuple(pods), state, where, why, job_span)


def build_report(
    jobs: Sequence[DemoJob],
    pods: Iterable[Mapping[str, Any]],
    inventory: Inventory,
) -> DemoReport:
    topologies: dict[str, NodeTopology] = {}
    node_labels: dict[str, Mapping[str, str]] = {}
    for state in inventory.nodes():
        node_labels[state.name] = state.labels
        if state.topology is not None:
            topologies[state.name] = state.topology
    by_name: dict[str, Mapping[str, Any]] = {}
    for pod in pods:
        by_name[str((pod.get("metadata") or {}).get("name", ""))] = pod
    rows = []
    for job in jobs:
        places = []
        for manifest in job.pods:
            name = str(manifest["metadata"]["name"])
            found = by_name.get(name)
            places.append(
                pod_place(found, topologies) if found is not None else PodPlace(name, "pending")
            )
        rows.append(_row(job, places, node_labels))
    running = [p for r in rows for p in r.pods if p.state == "running"]
    busy_by_node: dict[str, int] = {}
    mig_by_node: dict[str, int] = {}
    shared = {(p.node, p.shared_gpu) for p in running if p.shared_gpu is not None}
    for node, _ in shared:  # a shared GPU is busy: a whole-GPU pod cannot have it
        busy_by_node[node] = busy_by_node.get(node, 0) + 1
    for p in running:
        busy_by_node[p.node] = busy_by_node.get(p.node, 0) + len(p.gpus)
        mig_by_node[p.node] = mig_by_node.get(p.node, 0) + len(p.mig)
    gpus = busy = stranded = idle = mig_total = mig_busy = 0
    leaves: dict[str, list[int]] = {}
    leaf_spine: dict[str, str] = {}
    for name, topo in topologies.items():
        whole = sum(1 for g in topo.gpus if not g.mig_enabled)
        instances = sum(len(g.mig_instances) for g in topo.gpus if g.mig_enabled)
        used = busy_by_node.get(name, 0)
        gpus += whole
        busy += used
        idle += whole - used
        stranded += stranded_gpus(whole - used, used)
        mig_total += instances
        mig_busy += mig_by_node.get(name, 0)
        leaf = node_labels.get(name, {}).get(L.LEAF, "-")
        leaf_spine[leaf] = node_labels.get(name, {}).get(L.SPINE, "-")
        acc = leaves.setdefault(leaf, [0, 0, 0, 0, 0])
        acc[0] += 1
        acc[1] += whole
        acc[2] += used
        acc[3] += instances
        acc[4] += mig_by_node.get(name, 0)
    placed_pods = [p for r in rows for p in r.pods if p.state != "pending"]
    multi = [p for p in placed_pods if p.best_link is not None]
    gang_rows = [r for r in rows if r.job.gang and r.span]
    return DemoReport(
        rows=tuple(rows),
        nodes=len(topologies),
        gpus=gpus,
        busy_gpus=busy,
        mig_instances=mig_total,
        busy_mig=mig_busy,
        stranded=stranded,
        idle=idle,
        shared_gpus=len(shared),
        share_pods=sum(1 for p in running if p.shared_gpu is not None),
        multi_gpu_pods=len(multi),
        best_link_pods=sum(1 for p in multi if p.best_link),
        gangs=len(gang_rows),
        gangs_one_leaf=sum(1 for r in gang_rows if r.span in ("node", "leaf")),
        leaves=tuple(LeafUse(leaf, leaf_spine[leaf], *acc) for leaf, acc in sorted(leaves.items())),
    )


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.0f}%" if b else "-"


def format_report(report: DemoReport) -> str:
    lines = ["Jobs", ""]
    shared = (
        f"; {report.shared_gpus} of them shared by {report.share_pods} pods"
        if report.shared_gpus
        else ""
    )
    header = ("JOB", "WHAT", "PODS", "STATE", "WHERE")
    table = [header] + [
        (r.job.name, r.job.kind, f"{r.placed}/{len(r.pods)}", r.state, r.where) for r in report.rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for i, row in enumerate(table):
        lines.append(
            "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        )
        if i > 0:
            why = report.rows[i - 1].why
            lines.append(f"  {'':{widths[0]}}  why: {why}")
    lines += [
        "",
        "Cluster",
        "",
        f"  GPU utilisation   {report.busy_gpus}/{report.gpus} whole GPUs busy "
        f"({_pct(report.busy_gpus, report.gpus)}{shared}), "
        f"{report.busy_mig}/{report.mig_instances} MIG instances "
        f"({_pct(report.busy_mig, report.mig_instances)})",
        f"  fragmentation     {report.stranded} of {report.idle} idle GPUs stranded on partly "
        f"used nodes ({_pct(report.stranded, report.idle)}); the rest are whole free nodes",
        f"  locality          {report.best_link_pods}/{report.multi_gpu_pods} multi-GPU pods on "
        f"the best link class their node offers; {report.gangs_one_leaf}/{report.gangs} gangs "
        "inside one leaf",
        "",
        "  LEAF     SPINE    NODES  GPUs busy       MIG busy",
    ]
    for leaf in report.leaves:
        gpu = f"{leaf.busy}/{leaf.gpus} ({_pct(leaf.busy, leaf.gpus)})" if leaf.gpus else "-"
        mig = f"{leaf.mig_busy}/{leaf.mig} ({_pct(leaf.mig_busy, leaf.mig)})" if leaf.mig else "-"
        lines.append(f"  {leaf.leaf:8s} {leaf.spine:8s} {leaf.nodes:5d}  {gpu:15s} {mig}")
    return "\n".join(lines) + "\n"
