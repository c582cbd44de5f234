"""Gathering a gang into one NVLink clique by moving pods, instead of splitting it.

A multi-node gang that fits in no clique's free room when it arrives is split over several
cliques (``schedule_gang``'s fewest-cliques tier): it runs, but its members talk over the
network, and the pieces it leaves in each rack strand that rack's other GPUs (docs/topology.md,
"Keeping racks whole"). It never waits, so on-demand defragmentation — which acts for workloads
that do not fit at all — never asks for a clique to be freed for it.

:func:`gather_intent` is that request: given where the planner would put the gang, the gang's
placement intent with the whole gang required inside one clique (the ``SliceSpec`` a
ComputeDomain's pods get), when the gang is split over NVLink domains and some clique has GPUs
enough for all of it once movable pods leave. The defragmentation planner
(:func:`~.defrag.plan_defrag`) then looks for the cheapest moves that let the gang into one
clique, under its cost model; when there are none, the gang is placed split as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from coordinator.core.domains.capacity import NodeState
from coordinator.core.domains.layout import DomainKeys, build_layout
from coordinator.core.domains.slices import SliceSpec
from coordinator.core.domains.strategy import PlacementIntent

__all__ = ["gather_intent"]


def gather_intent(
    chosen: Iterable[str],
    gpus: int,
    nodes: Sequence[NodeState],
    *,
    keys: DomainKeys,
    intent: PlacementIntent | None = None,
) -> PlacementIntent | None:
    """The intent under which moves should make room for a gang of ``gpus`` GPUs in all that
    the planner would place on the nodes ``chosen``: ``intent`` with the whole gang in one
    clique; ``None`` when gathering cannot help — the gang is on one node or inside one clique
    already, it already names where the whole gang goes (``slices.gang_level``), cliques are not
    read (``keys.clique`` empty), or no clique has ``gpus`` healthy GPUs on schedulable nodes."""
    where = set(chosen)
    if len(where) < 2 or not keys.clique:
        return None
    intent = intent or PlacementIntent()
    if intent.slices is not None and intent.slices.gang_level is not None:
        return None
    if not any(keys.clique in n.labels for n in nodes):
        return None  # a cluster without cliques: no layout to read
    layout = build_layout(nodes, keys=keys)
    cliques = {layout.clique_of.get(name) for name in where}
    if len(cliques) == 1 and None not in cliques:
        return None
    by_name = {n.name: n for n in nodes}
    room = max(
        (
            sum(
                by_name[n].gpus_total - len(by_name[n].unhealthy_gpus)
                for n in clique.nodes
                if by_name[n].schedulable
            )
            for clique in layout.cliques.values()
        ),
        default=0,
    )
    if room < gpus:
        return None
    spec = intent.slices or SliceSpec()
    return replace(intent, slices=replace(spec, gang_level=keys.clique, gang_required=True))
