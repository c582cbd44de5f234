"""Keeps lone pods off the NVLink cliques large gangs need: stranding at the domain level.

Beside the per-node fragmentation term (:mod:`.fragscore`), which judges a node's own free GPUs,
``CliqueKeep`` judges the node's NVLink clique (``nvidia.com/gpu.clique``, an NVL72 rack): a pod
that is no gang's member — a small GPU pod, a share, a CPU-only pod — scores 100 on a node in no
clique and 0 on a node in one, so it takes a rack tray only when nothing else has room, and the
racks stay whole for the multi-tray gangs only they can hold in one NVLink domain. Gang members
are planned by the domain rules (their clique chosen there) and skip it. A cluster without
cliques is not scored.

Measured (``benchmarks/clique_placement.py``, docs/benchmarks.md): with it, clique GPUs stranded
in partly used racks fell by 15 % at half load and more whole racks stayed idle; a variant that
also preferred the busier of two cliques (binpacking lone pods into racks in use) stranded more
than no term at all, so it is not what this does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from common.labels import GFD_GPU_CLIQUE
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = ["PLUGIN", "CliqueKeep"]


class CliqueKeep(Plugin):
    name = "CliqueKeep"

    def __init__(self, label: str = GFD_GPU_CLIQUE) -> None:
        self.label = label

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        if pod.gang is not None:
            return SKIP  # the gang's planner chose its clique
        if not snapshot.domain_slots(self.label).total:
            return SKIP  # no cliques here
        return SUCCESS

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        return 0.0 if node.labels.get(self.label) else 100.0


PLUGIN: Final = PluginSpec[None](plugin=CliqueKeep, weight=3, weight_key="clique_keep")
