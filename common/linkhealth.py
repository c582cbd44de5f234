"""What the agent's health verdicts mean for placement (docs/health.md, "Placement").

A GPU pair joined by NVLink whose link the agent judged degraded (CRC, replay or recovery errors
rising, a port down for several cycles, a flapping port) counts as its *fallback* link class:
what the pair's traffic would cross without NVLink. The matrix's ``NV<n>`` cell does not say
what that is, so it is taken from the GPUs' NUMA nodes: ``NODE`` on one NUMA node, else ``SYS``
(conservative: the PCI path may be shorter).

Which pairs: a degraded port whose peer is another GPU of the node (direct NVLink: DGX-1, HGX
with bridges) degrades that pair. A degraded port whose peer is an NVSwitch (or unknown) on an
NVSwitch node degrades every NVLink pair of that GPU: NCCL stripes each peer's traffic over all
of a GPU's ports, so one bad port slows them all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import combinations
from typing import Final

import msgspec

from common.model import Link, NodeTopology, weakest

__all__ = [
    "degraded_pairs",
    "effective_link",
    "fabric_degraded",
    "fallback_link",
    "health_notes",
    "pcie_downtrained",
    "without_health",
    "worst_effective_link",
]

_PORT_PREFIX: Final = re.compile(r"^NVLink \d+(?: \(to [^)]*\))? ?")
_MEMO: dict[int, tuple[NodeTopology, dict[tuple[int, int], str]]] = {}
_MEMO_LIMIT: Final = 20_000


def _pair_text(i: int, j: int, reason: str | None) -> str:
    rest = _PORT_PREFIX.sub("", reason or "").strip() or "degraded"
    if not rest.startswith(("degraded", "down", "flapping", "…")):
        rest = f"degraded: {rest}"
    return f"NVLink {i}–{j} {rest}"


def degraded_pairs(topology: NodeTopology) -> dict[tuple[int, int], str]:
    """``(i, j)`` (``i < j``) → why, for every NVLink pair the agent's verdicts degrade."""
    hit = _MEMO.get(id(topology))
    if hit is not None and hit[0] is topology:
        return hit[1]
    out: dict[tuple[int, int], str] = {}
    by_bus = {g.pci_bus_id.lower(): g.index for g in topology.gpus if g.pci_bus_id}
    n = len(topology.gpus)
    for gpu in topology.gpus:
        if gpu.health is None:
            continue
        i = gpu.index
        for port in gpu.health.nvlinks:
            if port.status == "ok":
                continue
            peer = by_bus.get((port.peer_bus_id or "").lower())
            peers = (
                [peer]
                if peer is not None
                else [j for j in range(n) if topology.nvswitch and j != i]
            )
            for j in peers:
                if j == i or not topology.link(i, j).is_nvlink:
                    continue
                key = (min(i, j), max(i, j))
                out.setdefault(key, _pair_text(key[0], key[1], port.reason))
    if len(_MEMO) >= _MEMO_LIMIT:
        _MEMO.clear()
    _MEMO[id(topology)] = (topology, out)
    return out


def fallback_link(topology: NodeTopology, i: int, j: int) -> Link:
    """The class a degraded NVLink pair counts as: ``NODE`` on one NUMA node, else ``SYS``."""
    a, b = topology.gpus[i].numa_node, topology.gpus[j].numa_node
    return Link("NODE") if a is not None and a == b else Link("SYS")


def effective_link(topology: NodeTopology, i: int, j: int) -> Link:
    """The matrix cell, or its fallback class when the agent judged the pair's NVLink degraded."""
    if i != j and (min(i, j), max(i, j)) in degraded_pairs(topology):
        return fallback_link(topology, i, j)
    return topology.link(i, j)


def worst_effective_link(topology: NodeTopology, gpus: Sequence[int]) -> Link:
    """The weakest effective link among ``gpus`` (``X`` for one GPU): ``worst_link`` with
    degraded pairs at their fallback class."""
    return weakest(effective_link(topology, a, b) for a, b in combinations(gpus, 2))


def pcie_downtrained(topology: NodeTopology) -> dict[int, str]:
    """GPU index → ``PCIe link trained to x8 Gen4 of x16``, for GPUs narrower than their max."""
    out: dict[int, str] = {}
    for g in topology.gpus:
        cur, top = g.pcie_width_current, g.pcie_width_max
        if cur is not None and top is not None and 0 < cur < top:
            gen = f" Gen{g.pcie_gen_current}" if g.pcie_gen_current else ""
            out[g.index] = f"GPU {g.index} PCIe link trained to x{cur}{gen} of x{top}"
    return out


def health_notes(topology: NodeTopology, gpus: Sequence[int] | None = None) -> list[str]:
    """What placement made of the node's health, in words: GPUs not offered, degraded NVLink
    pairs (counted as their fallback class), downtrained PCIe links, a degraded fabric.
    ``gpus``: only what concerns those GPUs."""
    keep = None if gpus is None else set(gpus)
    notes: list[str] = []
    for g in topology.gpus:
        if keep is not None and g.index not in keep:
            continue
        if not g.healthy:
            why = "; ".join(g.health.reasons) if g.health and g.health.reasons else None
            why = why or g.health_reason or "reported unhealthy"
            notes.append(f"GPU {g.index} not offered: {why}")
    for (i, j), text in sorted(degraded_pairs(topology).items()):
        if keep is None or i in keep or j in keep:
            notes.append(f"{text} (counted as {fallback_link(topology, i, j)})")
    for i, text in sorted(pcie_downtrained(topology).items()):
        if keep is None or i in keep:
            notes.append(text)
    fabric = fabric_degraded(topology)
    if fabric:
        notes.append(fabric)
    return notes


def fabric_degraded(topology: NodeTopology) -> str | None:
    """Why the node's multi-node NVLink fabric is degraded, or ``None``."""
    for g in topology.gpus:
        f = g.health.fabric if g.health is not None else None
        if f is None:
            continue
        if f.degraded_bandwidth:
            return f"NVLink fabric bandwidth degraded (GPU {g.index})"
        if f.route_unhealthy:
            return f"NVLink fabric route unhealthy (GPU {g.index})"
    return None


def without_health(topology: NodeTopology) -> NodeTopology:
    """``topology`` as a health-blind scheduler would see it: the agent's verdicts left out
    (``healthy`` kept: lost GPUs and fatal XIDs were never offered)."""
    if all(g.health is None for g in topology.gpus):
        return topology
    gpus = tuple(msgspec.structs.replace(g, health=None) for g in topology.gpus)
    return msgspec.structs.replace(topology, gpus=gpus)
