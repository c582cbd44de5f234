"""Keeps lone pods off the NVLink cliques large gangs need: stranding at the domain level.

Beside the per-node fragmentation term (:mod:`.fragscore`), which judges a node's own free GPUs,
``CliqueKeep`` judges the node's NVLink clique (``nvidia.com/gpu.clique``, an NVL72 rack). A pod
that is no gang's member scores 100 on a node in no clique. A small GPU pod or a share also
scores 100 on a rack tray already partly used (it takes no whole tray from the gangs), 50 on a
whole tray of a rack already broken into, and 0 on a tray of an idle rack; a CPU-only pod scores
0 on any rack tray. Gang members are planned by the domain rules (their clique chosen there) and
skip it. A cluster without cliques is not scored.

A cycle scores a sample of the feasible nodes (kube-scheduler's adaptive
``percentageOfNodesToScore``: 101 of 208 nodes, from a rotating start), and no weight helps a
node never scored: so for a lone GPU pod the search visits the nodes this scores 100 first
(:meth:`CliqueKeep.visit_first`). CPU-only pods keep kube-scheduler's order.

The table follows the domain-level measure (a clique's free GPUs while some of its GPUs are
busy: :func:`~coordinator.core.domains.summary.clique_stranded`, ``stranded`` in
``GET /v1/domains``) for the pod being placed: no change (no clique), lowered without losing a
whole tray (a partly used tray), lowered at the cost of a whole tray (a broken rack's), or the
whole rack's free GPUs stranded (an idle rack).

Measured (``benchmarks/clique_placement.py``, docs/topology.md#keeping-racks-whole-cliquekeep):
stranded clique GPUs as today at low and half load, fewer in a backlog; visiting every node
outside the racks first and scoring all rack trays 0 stranded more (the holes gangs leave in
racks then stay empty), and so did binpacking lone pods into the busiest rack, sending them to
racks with too few free trays for any gang, and scoring them by the rack's fragmentation growth
against the gang sizes. Most stranded GPUs sit beside gangs, not lone pods.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Final

from common.labels import GFD_GPU_CLIQUE
from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = ["PLUGIN", "CliqueKeep"]


_USED: Final = StateKey[Mapping[str, int]]("CliqueKeep")


class CliqueKeep(Plugin):
    name = "CliqueKeep"

    def __init__(self, label: str = GFD_GPU_CLIQUE) -> None:
        self.label = label

    def visit_first(
        self, state: CycleState, pod: PodRequest, snapshot: Snapshot
    ) -> Collection[str] | None:
        """A lone GPU pod (whole GPUs, MIG, a share) has the nodes it scores best visited first
        — nodes in no clique and rack trays already partly used — so that the sample a cycle
        scores holds them. Other pods keep kube-scheduler's order."""
        if pod.gang is not None or not pod.wants_devices:
            return None
        slots = snapshot.domain_slots(self.label)
        if not slots.total:
            return None
        return slots.open  # kept current by the snapshot, not rebuilt per pod

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        if pod.gang is not None:
            return SKIP  # the gang's planner chose its clique
        slots = snapshot.domain_slots(self.label)
        if not slots.total:
            return SKIP  # no cliques here
        state.write(_USED, slots.used)
        return SUCCESS

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        clique = node.labels.get(self.label)
        if not clique:
            return 100.0
        if not pod.wants_devices:
            return 0.0  # a CPU-only pod: any node outside the racks first
        if 0 < node.gpu_slots_used < node.gpu_slots:
            return 100.0  # a tray already partly used: no whole tray is lost to the gangs
        if state.read(_USED).get(clique, 0) > 0:
            return 50.0  # a whole tray of a rack already broken into
        return 0.0  # a tray of an idle rack: the last resort


PLUGIN: Final = PluginSpec[None](plugin=CliqueKeep, weight=3, weight_key="clique_keep")
