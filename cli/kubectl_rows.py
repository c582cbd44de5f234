"""The tables of ``kubectl topos``: one row per node, GPU, mismatch, DRA share or gang, from the
coordinator's JSON (``GET /v1/inventory``, ``/v1/nodes/{name}``, ``/v1/gangs``), and the
column alignment kubectl's own tables have."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from common import podkeys


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns aligned like kubectl's own tables."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [headers, *rows]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _status(node: dict[str, Any]) -> str:
    """The STATUS column. A node no agent stream describes is ``NoAgent`` — unless its topology
    came from the Node's ``topos.io/topology`` annotation (a coordinator restart, a cluster that
    runs ``topos agent --once``): Topos schedules on it, so it is ``Ready (annotation)``."""
    if node.get("ready") is False:
        return "NotReady"
    if node.get("stale"):
        return "Stale"
    unschedulable = node.get("unschedulable") or not node.get("schedulable", True)
    if not node.get("connected", True):
        if node.get("topology_source") != "annotation":
            return "NoAgent"
        return "Unschedulable (annotation)" if unschedulable else "Ready (annotation)"
    return "Unschedulable" if unschedulable else "Ready"


def node_row(node: dict[str, Any]) -> list[str]:
    """One row of ``kubectl topos nodes`` from a node of ``GET /v1/inventory``."""
    topo = node.get("topology") or {}
    gpus = [g for g in topo.get("gpus") or [] if isinstance(g, dict)]
    whole = [g for g in gpus if not g.get("mig_enabled")]  # MIG GPUs are shared out in slices
    free = node.get("free") or {}
    allocatable = node.get("allocatable") or {}
    total = len(whole) if gpus else int(allocatable.get(podkeys.GPU_RESOURCE, 0))
    held = {u.get("uuid") for u in node.get("gpu_use") or [] if u.get("holder")}
    per_numa: dict[int, list[int]] = {}
    for gpu in whole:
        numa = gpu.get("numa_node")
        if isinstance(numa, int):
            slot = per_numa.setdefault(numa, [0, 0])
            slot[1] += 1
            if gpu.get("uuid") not in held:
                slot[0] += 1
    numa_text = " ".join(f"{n}:{f}/{t}" for n, (f, t) in sorted(per_numa.items())) or "-"
    mig = sorted(
        (key.removeprefix(podkeys.MIG_RESOURCE_PREFIX), value)
        for key, value in free.items()
        if key.startswith(podkeys.MIG_RESOURCE_PREFIX) and isinstance(value, int)
    )
    mig_text = ",".join(f"{profile}={count}" for profile, count in mig) or "-"
    products = sorted({str(g["product"]) for g in gpus if g.get("product")})
    labels = node.get("labels") or {}
    free_gpus = int(free.get(podkeys.GPU_RESOURCE, 0))
    if whole:  # a GPU pods share holds no nvidia.com/gpu of theirs, yet it is not free
        free_gpus = min(free_gpus, sum(1 for g in whole if g.get("uuid") not in held))
    return [
        str(node.get("name", "?")),
        _status(node),
        ", ".join(products) or "-",
        f"{free_gpus}/{total}",
        numa_text,
        mig_text,
        str(labels.get("topos.io/leaf", "-")),
        _clique(str(labels.get("nvidia.com/gpu.clique", ""))),
    ]


def _clique(value: str) -> str:
    """GFD's ``<clusterUUID>.<cliqueId>`` as ``<first 8 of the UUID>.<cliqueId>`` (what tells
    racks apart at a glance); anything else as written."""
    uuid, dot, clique = value.rpartition(".")
    if not value:
        return "-"
    return f"{uuid[:8]}.{clique}" if dot and len(uuid) == 36 else value


NODE_HEADERS = (
    "NODE",
    "STATUS",
    "GPU",
    "GPUS FREE",
    "NUMA FREE",
    "MIG FREE",
    "LEAF",
    "NVLINK CLIQUE",
)
GPU_HEADERS = ("NODE", "GPU", "PRODUCT", "USE", "HOLDERS")


def _holder_text(holder: dict[str, Any]) -> str:
    parts = [str(holder.get("pod", "?"))]
    if isinstance(holder.get("fraction"), int | float):
        parts.append(f"{holder['fraction']:g}")
    if isinstance(holder.get("memory_mib"), int):
        mib = holder["memory_mib"]
        parts.append(f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi")
    return " ".join(parts)


def gpu_rows(node: dict[str, Any]) -> list[list[str]]:
    """``kubectl topos gpus`` rows of one node: each GPU, how it is used, and by whom (a GPU
    pods share lists each holder with its share)."""
    uses = {u.get("uuid"): u for u in node.get("gpu_use") or [] if isinstance(u, dict)}
    rows = []
    for gpu in (node.get("topology") or {}).get("gpus") or []:
        if not isinstance(gpu, dict):
            continue
        use = uses.get(gpu.get("uuid")) or {}
        holders = [h for h in use.get("holders") or [] if isinstance(h, dict)]
        if not holders and use.get("holder"):
            holders = [{"pod": use["holder"]}]
        if gpu.get("mig_enabled"):
            state = "MIG"
            holders = [
                h
                for i in gpu.get("mig_instances") or []
                if isinstance(i, dict)
                for h in (uses.get(i.get("uuid")) or {}).get("holders") or []
            ]
        elif not holders:
            state = "free"
        elif use.get("free_fraction") is not None:
            state = f"shared, {use['free_fraction']:g} free"
        elif len(holders) > 1 or holders[0].get("fraction") is not None:
            state = "shared"
        else:
            state = "whole"
        rows.append(
            [
                str(node.get("name", "?")),
                str(gpu.get("index", "?")),
                str(gpu.get("product") or "-"),
                state,
                ", ".join(_holder_text(h) for h in holders) or "-",
            ]
        )
    return rows


MISMATCH_HEADERS = ("NAMESPACE", "POD", "NODE", "ASSIGNED", "GIVEN")
DRA_SHARE_HEADERS = ("GPU", "DEVICE", "CLAIM", "CONSUMED")
GANG_HEADERS = ("NAMESPACE", "NAME", "PHASE", "MIN", "MEMBERS", "RESERVED", "BOUND", "MESSAGE")


def _with_link(devices: Any, link: Any) -> str:
    return f"{devices} ({link})" if link else str(devices)


def mismatch_rows(node: dict[str, Any]) -> list[list[str]]:
    """``kubectl topos mismatches`` rows of one node: pods it gave other GPUs than assigned."""
    return [
        [
            str(m.get("namespace", "?")),
            str(m.get("pod", "?")),
            str(node.get("name", "?")),
            _with_link(m.get("assigned_devices", "?"), m.get("assigned_link")),
            _with_link(m.get("given_devices", "?"), m.get("given_link")),
        ]
        for m in node.get("mismatches") or []
        if isinstance(m, dict)
    ]


def dra_share_rows(node: dict[str, Any]) -> list[list[str]]:
    """``kubectl topos dra-shares`` rows: one per share of a node's DRA device (KEP-5075)."""
    rows = []
    for share in node.get("dra_shares") or []:
        if not isinstance(share, dict):
            continue
        consumed = share.get("consumed") or {}
        rows.append(
            [
                str(share.get("gpu") or "-"),
                str(share.get("device", "?")).rpartition("/")[2],
                str(share.get("claim", "?")),
                " ".join(f"{k}={v}" for k, v in sorted(consumed.items())) or "-",
            ]
        )
    return rows


def gang_row(gang: dict[str, Any]) -> list[str]:
    def get(key: str) -> str:
        value = gang.get(key)
        return "-" if value is None else str(value)

    return [
        get("namespace"),
        get("name"),
        get("phase"),
        get("min_member"),
        get("members"),
        get("reserved"),
        get("bound"),
        get("message"),
    ]
