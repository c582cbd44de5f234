"""ComputeDomainClique: a pod of an NVIDIA ComputeDomain that is no gang's member still goes to
the NVLink clique of its domain.

A gang's ComputeDomain is kept in one clique by the gang planner
(:mod:`coordinator.core.gangs.computedomain`). A lone pod of one — a Job whose pods are created
one after another, no gang keys — is judged here, from its IMEX channel claim (the claim's
configuration names the domain; of the ComputeDomain object only ``spec.numNodes`` is read):

- some of the domain's other channels are allocated, on nodes of one clique: the pod goes to a
  node of that clique, or waits (``ComputeDomain <uid> runs in NVLink clique <c>``); channels
  already in two cliques refuse it, naming both;
- none is allocated yet: the pod goes to a clique with room for every pod of the domain whose
  channel is not allocated (its own and those of the domain's pods not yet placed: their claims
  exist from the moment the pods do) and, when the ComputeDomain states its ``spec.numNodes``
  (N > 0), with N nodes that each have room for a pod of its size — pods created one by one
  then find their room beside the first; when no clique has that room it waits, naming the
  roomiest. A ComputeDomain whose ``numNodes`` is 0 (unknown: NVIDIA's recommended value) or
  bad (refused naming the field and the value, ``topos_dra_rejected_objects``) counts its pods
  alone.

A node's clique is its ``nvidia.com/gpu.clique`` label when well formed and its fabric is not
degraded or down (``topos.io/gpu.fabric``), as the domain tree reads it. Skipped on clusters
without cliques and for pods that claim no channel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from common.labels import GFD_GPU_CLIQUE
from coordinator.core.dra.channels import domain_channels, pod_domain
from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.cliquelabel import trusted_clique
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = ["PLUGIN", "ComputeDomainClique"]


@dataclass(frozen=True, slots=True)
class _Pin:
    cliques: frozenset[str]  # where the pod may go
    clique_of: Mapping[str, str]  # node → its trusted clique
    refusal: Status  # for a node elsewhere


_KEY: Final = StateKey[_Pin]("ComputeDomainClique")


class ComputeDomainClique(Plugin):
    name = "ComputeDomainClique"

    def __init__(self, label: str = GFD_GPU_CLIQUE) -> None:
        self.label = label

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        if pod.gang is not None or not pod.claims:
            return SKIP  # a gang's domain is the gang planner's
        dra = snapshot.dra
        if dra.empty:
            return SKIP
        domain = pod_domain(pod, dra)
        if domain is None:
            return SKIP
        clique_of = self._trusted(snapshot)
        if not clique_of:
            return SKIP
        own = {(pod.namespace, e.resolved_name) for e in pod.claims}
        found = domain_channels(dra, domain, clique_of, snapshot.labels_of, besides=own)
        running, waiting = found.cliques, found.waiting + 1  # + this pod's channel
        if len(running) > 1:
            return Status.unresolvable(
                f"ComputeDomain {domain} already has channels in {len(running)} NVLink cliques "
                f"({', '.join(sorted(running))}): no one clique holds its pods"
            )
        if running:
            clique = next(iter(running))
            why = f"ComputeDomain {domain} runs in NVLink clique {clique}"
            state.write(_KEY, _Pin(running, clique_of, Status.unschedulable(why)))
            return SUCCESS
        room, nodes = _room(pod, snapshot, clique_of)
        size = dra.domain_nodes.get(domain, 0)  # spec.numNodes; 0: not known
        holding = frozenset(c for c, r in room.items() if r >= waiting and nodes[c] >= size)
        if size:
            need = f"{size} nodes (numNodes) and the {waiting} pods"
            have = "nodes with room for one of its pods, pods"
        else:
            need, have = f"the {waiting} pods", "pods"
        if not holding:
            best = min(room, key=lambda c: (-nodes[c] if size else 0, -room[c], c))
            held = f"{nodes[best]} {have} {room[best]}" if size else f"{room[best]}"
            return Status.unschedulable(
                f"no NVLink clique has room for {need} of ComputeDomain {domain} not yet "
                f"placed: the roomiest, {best}, holds {held}"
            )
        why = f"the clique cannot hold {need} of ComputeDomain {domain} not yet placed"
        state.write(_KEY, _Pin(holding, clique_of, Status.unschedulable(why)))
        return SUCCESS

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        pin = state.read(_KEY)
        if pin.clique_of.get(node.name) in pin.cliques:
            return SUCCESS
        return pin.refusal

    def _trusted(self, snapshot: Snapshot) -> dict[str, str]:
        out: dict[str, str] = {}
        for name in snapshot.domains(self.label):
            node = snapshot.get(name)
            clique = trusted_clique(node.labels, self.label) if node is not None else None
            if clique is not None:
                out[name] = clique
        return out


def _room(
    pod: PodRequest, snapshot: Snapshot, clique_of: Mapping[str, str]
) -> tuple[dict[str, int], dict[str, int]]:
    """Per clique: the pods of this one's size its schedulable nodes have room for (GPUs: whole
    free GPUs; otherwise one per node), and how many of its nodes have room for one."""
    room: dict[str, int] = {}
    nodes: dict[str, int] = {}
    for name, clique in clique_of.items():
        node = snapshot.get(name)
        if node is None:
            continue
        fits = 0
        if not node.unschedulable:
            fits = node.free_whole_gpus // pod.gpus if pod.gpus > 0 else 1
        room[clique] = room.get(clique, 0) + fits
        nodes[clique] = nodes.get(clique, 0) + (fits > 0)
    return room, nodes


PLUGIN: Final = PluginSpec[None](plugin=ComputeDomainClique)
