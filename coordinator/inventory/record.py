"""One node's record in the inventory, and what follows from the record alone: its topology and
where that came from, whether it is schedulable, its allocatable and free resources, and the
frozen :class:`NodeState` readers get.

A node's topology has one of two sources (``topology_source``):

- ``"stream"``: the report of its agent's capacity stream (hello, then deltas). Once a stream has
  said hello it wins: the Node's annotation does not replace it while the stream is connected,
  and when the stream closes the node keeps what the stream last said (stale after the TTL).
- ``"annotation"``: the topology the agent published on the Node (``topos.io/topology``), for a
  node no stream has described — after a coordinator restart until the agent is back, or on a
  cluster that runs only ``topos agent --once``. It is a seed: never newer than a stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from common.allocatable import allocatable_from_topology
from common.model import NodeTopology
from common.wire import ContainerAllocation
from coordinator.core.domains.sources import LEVEL_KEYS
from coordinator.inventory.holdings import gpu_use
from coordinator.inventory.mismatch import find_mismatches
from coordinator.inventory.state import (
    GPU_RESOURCE,
    AgentReport,
    BoundPod,
    KubeNode,
    NodeState,
    PodUsage,
)

TopologySource = Literal["stream", "annotation"]


@dataclass(slots=True)
class NodeRecord:
    name: str
    agent: AgentReport | None = None
    kube: KubeNode | None = None
    pods: dict[str, BoundPod] = field(default_factory=dict)  # by uid
    requested: dict[str, int] = field(default_factory=dict)
    stale: bool = False
    view: NodeState | None = None
    sched: NodeState | None = None  # the view without its display parts (the scheduler's)
    bound: tuple[BoundPod, ...] | None = None  # bound_pods, until the node changes
    # (namespace, name) deleted since the agent last sent allocations: its word on them is stale
    gone: set[tuple[str, str]] = field(default_factory=set)
    # The tree source's levels for this node (``None``: no source; labels are the Node's own)
    # and why a level it is in is not used; where the Node's own labels of those levels differ.
    levels: dict[str, str] | None = None
    level_problem: str | None = None
    level_disagreement: str | None = None

    def empty(self) -> bool:
        return self.agent is None and self.kube is None and not self.pods


def topology_of(
    rec: NodeRecord, *, seeds: bool
) -> tuple[NodeTopology | None, TopologySource | None]:
    """The node's topology and its source. ``seeds``: whether Node annotations count yet (not
    during the start-up grace)."""
    if rec.agent is not None:
        return rec.agent.topology, "stream"
    if seeds and rec.kube is not None and rec.kube.topology is not None:
        return rec.kube.topology, "annotation"
    return None, None


def schedulable(rec: NodeRecord) -> bool:
    """Only a node the API server has, Ready, not cordoned, whose stream (if any) is not stale."""
    kube = rec.kube
    return kube is not None and kube.ready and not kube.unschedulable and not rec.stale


def allocatable(rec: NodeRecord, topology: NodeTopology | None) -> dict[str, int]:
    if rec.kube is not None and rec.kube.allocatable:
        return rec.kube.allocatable
    return {} if topology is None else allocatable_from_topology(topology)


def free(rec: NodeRecord, topology: NodeTopology | None) -> dict[str, int]:
    alloc = allocatable(rec, topology)
    out = {k: max(0, v - rec.requested.get(k, 0)) for k, v in alloc.items()}
    if topology is not None and GPU_RESOURCE in out:
        # Conservative: a GPU the agent reports unhealthy can't be handed out.
        unhealthy = sum(1 for g in topology.gpus if not g.healthy and not g.mig_enabled)
        out[GPU_RESOURCE] = max(0, out[GPU_RESOURCE] - unhealthy)
    if "pods" in out:
        out["pods"] = max(0, alloc["pods"] - len(rec.pods))
    return out


def held(rec: NodeRecord) -> tuple[ContainerAllocation, ...]:
    """The agent's allocations, less those of pods deleted since it reported them."""
    allocations = () if rec.agent is None else rec.agent.allocations
    if not rec.gone:
        return allocations
    return tuple(a for a in allocations if (a.namespace, a.pod) not in rec.gone)


def labels(rec: NodeRecord) -> dict[str, str]:
    """The Node's labels, with the tree source's levels (when one is set) in place of the
    Node's own values of :data:`~coordinator.core.domains.sources.LEVEL_KEYS`."""
    own = {} if rec.kube is None else rec.kube.labels
    if rec.levels is None:
        return own
    kept = {k: v for k, v in own.items() if k not in LEVEL_KEYS}
    kept.update(rec.levels)
    return kept


def build_view(rec: NodeRecord, *, now: float, seeds: bool, display: bool = True) -> NodeState:
    """``display`` False: without who holds each device, mismatches and the pod list (what
    ``GET /v1/nodes`` shows; the scheduler's snapshot reads none of it)."""
    agent, kube = rec.agent, rec.kube
    topology, source = topology_of(rec, seeds=seeds)
    holdings = held(rec) if display else ()
    return NodeState(
        name=rec.name,
        stale=rec.stale,
        connected=agent is not None and agent.connected,
        schedulable=schedulable(rec),
        ready=None if kube is None else kube.ready,
        unschedulable=kube is not None and kube.unschedulable,
        agent_id=None if agent is None else agent.agent_id,
        agent_version=None if agent is None else agent.agent_version,
        seq=None if agent is None else agent.seq,
        last_seen_age_s=None if agent is None else round(now - agent.last_seen, 3),
        labels=labels(rec),
        taints=() if kube is None else kube.taints,
        allocatable=dict(allocatable(rec, topology)),
        requested=dict(rec.requested),
        free=free(rec, topology),
        topology=topology,
        topology_source=source,
        annotation_error=None if kube is None else kube.topology_error,
        cached_models=frozenset() if kube is None else kube.cached_models,
        allocations=() if agent is None else agent.allocations,
        gpu_use=gpu_use(topology, rec.pods.values(), holdings) if display else (),
        mismatches=find_mismatches(topology, rec.pods.values(), holdings) if display else (),
        pods=tuple(
            PodUsage(namespace=p.namespace, name=p.name, scheduler=p.scheduler, requests=p.requests)
            for p in sorted(rec.pods.values(), key=lambda p: (p.namespace, p.name))
        )
        if display
        else (),
    )
