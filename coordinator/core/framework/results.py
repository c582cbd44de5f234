"""What one scheduling cycle returns: a :class:`Decision` (a node and the devices on it) or a
:class:`Failure` (why no node would do), each with the per-node verdicts explain shows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from common import podkeys
from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.volumes import VolumeWrites
from coordinator.core.status import Code, Status

__all__ = ["Decision", "Failure", "NodeVerdict", "ScheduleResult"]


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """What the cycle concluded about one node (for explanations)."""

    status: Status
    scores: Mapping[str, float] = field(default_factory=dict)  # plugin → weighted score
    total: float = 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    pod_key: str
    node: str
    placement: Placement
    device_ids: tuple[str, ...]  # GPU UUIDs, then MIG device ids
    score: float
    breakdown: Mapping[str, float]  # plugin → weighted score on the chosen node
    verdicts: Mapping[str, NodeVerdict]  # every node evaluated this cycle
    evaluated: int
    feasible: int
    # DRA: the claims to allocate (and reserve for the pod) before the Binding, in order.
    claims: tuple[ClaimAllocation, ...] = ()
    # Volumes: the PVs to bind and claims to provision for the node before the Binding.
    volumes: VolumeWrites | None = None
    state: CycleState = field(repr=False, compare=False, default_factory=CycleState)

    @property
    def numa(self) -> tuple[int, ...]:
        return self.placement.numa

    def annotations(self) -> dict[str, str]:
        """The ``topos.io/assigned-*`` annotations to write on the pod before binding (and
        ``topos.io/gpu-share`` for a pod sharing its GPU)."""
        out = {
            podkeys.ASSIGNED_GPUS: ",".join(self.device_ids),
            podkeys.ASSIGNED_NUMA: ",".join(str(n) for n in self.placement.numa),
            podkeys.PLACEMENT_SCORE: f"{self.score:.1f}",
        }
        if self.placement.share is not None:
            out[podkeys.GPU_SHARE] = self.placement.share.text()
        return out


@dataclass(frozen=True, slots=True)
class Failure:
    pod_key: str
    total_nodes: int
    statuses: Mapping[str, Status]  # node → why not
    message: str  # kube-scheduler style: "0/12 nodes are available: …"
    pod_status: Status | None = None  # set when the pod itself was rejected (bad spec, gang…)

    @property
    def unresolvable(self) -> bool:
        """No preemption could help: every node said UnschedulableAndUnresolvable, or the attempt
        ended in an error (kube-scheduler runs no PostFilter then)."""
        if self.pod_status is not None:
            return self.pod_status.code in (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.ERROR)
        return all(s.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE for s in self.statuses.values())

    @property
    def gated(self) -> bool:
        """The pod waits for an object another controller makes (a claim from its template)."""
        return self.pod_status is not None and self.pod_status.gated

    @property
    def verdicts(self) -> Mapping[str, NodeVerdict]:
        return {name: NodeVerdict(status) for name, status in self.statuses.items()}


ScheduleResult = Decision | Failure
