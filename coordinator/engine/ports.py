"""What the scheduler writes to a cluster, whichever cluster it is.

``ClusterWriter`` is the small surface the runtime needs: write a pod's DRA claims (allocated and
reserved for it, before its Binding; undone when the bind does not happen), bind a pod (decision
annotations first, then the Binding), explain why a pod can't be placed (the ``PodScheduled=False``
condition, with a preemptor's ``status.nominatedNodeName`` in the same write; the caller adds
the ``FailedScheduling`` Warning Event), record a success (a ``Scheduled`` Normal Event), post
any other Event (gangs, preemption), and evict. A :data:`Nominate` writes a nomination alone.
:mod:`coordinator.adapters.kube.writer` implements it on the API server,
:mod:`coordinator.adapters.memory.cluster` on an in-process store (the embedded demo,
``--in-memory``).

Errors: :class:`BindConflict` when the bind can never succeed as decided (pod deleted or
recreated, already bound, node gone) — forget the assumption and move on; :class:`ClusterError`
for anything transient — retry later. A claim changed or allocated by someone else since the
decision is a :class:`BindConflict` too (the decision was made against an older claim).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

from common.linkhealth import health_notes, worst_effective_link
from common.model import NodeTopology
from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.framework.results import Decision
from coordinator.core.snapshot.volumes import VolumeWrites

__all__ = [
    "COMPONENT",
    "BindConflict",
    "ClusterError",
    "ClusterWriter",
    "NoAnswer",
    "Nominate",
    "PodRef",
    "scheduled_message",
]

#: ``source.component`` / ``reportingComponent`` of our Events (what ``kubectl describe`` shows
#: in the "From" column).
COMPONENT: Final = "topos"
REASON_SCHEDULED: Final = "Scheduled"
REASON_FAILED: Final = "FailedScheduling"
CONDITION_REASON: Final = "Unschedulable"


class ClusterError(Exception):
    """A write failed for a reason that may pass (API down, throttled, timeout)."""


class NoAnswer(ClusterError):
    """No answer from the cluster's API at all (connection refused or reset, a timeout): the
    write may or may not have happened, and every other write would fail the same way."""


class BindConflict(ClusterError):
    """The bind cannot succeed as decided: the pod was deleted or recreated, is bound already,
    or the node is gone."""


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> PodRef:
        meta = obj.get("metadata") or {}
        return cls(
            str(meta.get("namespace") or "default"),
            str(meta.get("name") or ""),
            str(meta.get("uid") or ""),
        )


#: Records ``status.nominatedNodeName`` on a pod (``""``: clears it).
Nominate = Callable[[PodRef, str], Coroutine[Any, Any, None]]


class ClusterWriter(Protocol):
    async def allocate_claims(
        self, pod: PodRef, claims: Sequence[ClaimAllocation]
    ) -> tuple[ClaimAllocation, ...]:
        """Allocate each claim as decided and reserve it for ``pod``, in order: an existing claim
        gets the ``resource.kubernetes.io/delete-protection`` finalizer, then ``status.allocation``
        and ``status.reservedFor`` with its ``resourceVersion`` as precondition (an allocation
        without ``results`` only reserves: the claim is allocated already); an extended-resource
        claim (``spec`` set) is created, owned by the pod, allocated, reserved and named in the
        pod's ``status.extendedResourceClaimStatus``. Returns the claims as written (created ones
        named). All or nothing: on failure what this call wrote is undone before it raises."""
        ...

    async def release_claims(self, pod: PodRef, claims: Sequence[ClaimAllocation]) -> None:
        """Undo :meth:`allocate_claims` (the bind did not happen): ``pod`` leaves each claim's
        ``reservedFor``, claims this call allocated are deallocated (their finalizer removed),
        claims it created are deleted. Best effort; a claim gone meanwhile is no error."""
        ...

    async def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
        """Merge ``annotations`` into the pod, then bind it to ``node``."""
        ...

    async def explain(self, pod: PodRef, message: str, *, nominated: str = "") -> bool:
        """``PodScheduled=False`` (reason Unschedulable, ``message``) on ``pod``; ``nominated``:
        the same write sets ``status.nominatedNodeName`` (a preemptor's one write, as
        kube-scheduler's) and is sent in its turn, not deferred. ``False``: nothing was written
        and nothing should follow (no ``FailedScheduling`` Event): the pod is bound or being
        bound, re-created under its name, or gone."""
        ...

    async def record_scheduled(self, pod: PodRef, message: str) -> None:
        """``Scheduled`` Normal Event."""
        ...

    async def event(
        self, pod: PodRef, *, reason: str, message: str, event_type: str = "Normal"
    ) -> None:
        """Any other Event about a pod (gang waits, preemption)."""
        ...

    async def evict(self, pod: PodRef, *, grace_period_s: int | None = None) -> None:
        """Evict (disruption budgets apply where the cluster has them). With ``pod.uid`` only
        that pod: one re-created under its name since is left alone, and the eviction counts as
        done (the pod it was meant for is gone), as does a pod not found. ``grace_period_s``
        overrides the pod's termination grace period (0: at once, for a pod no kubelet will
        stop, such as one bound to a deleted Node)."""
        ...


@runtime_checkable
class VolumeWriter(Protocol):
    """A :class:`ClusterWriter` that can also bind a pod's WaitForFirstConsumer volumes."""

    async def bind_volumes(self, pod: PodRef, writes: VolumeWrites) -> None:
        """kube-scheduler's VolumeBinding PreBind, before ``pod``'s Binding: each PV matched
        gets ``spec.claimRef`` (its ``resourceVersion`` as precondition: a PV taken meanwhile is
        a :class:`BindConflict`), each claim to provision ``volume.kubernetes.io/selected-node``
        (``writes.node``). It does not wait for the PV controller to finish the bindings."""
        ...


def _link_name(topology: NodeTopology, gpus: tuple[int, ...]) -> str:
    if len(gpus) < 2:
        return ""
    link = worst_effective_link(topology, gpus)
    if link.is_nvlink:
        return "NVSwitch" if topology.nvswitch else "NVLink"
    return str(link)


def scheduled_message(pod: PodRef, decision: Decision, topology: NodeTopology | None) -> str:
    """``Successfully assigned ns/pod to node (GPUs 0,1,2,3 NVLink; NUMA 0)``; a share:
    ``… (0.5 of GPU 3, 39.8Gi of its memory)``."""
    parts: list[str] = []
    placement = decision.placement
    if placement.share is not None and len(placement.gpus) == 1:
        parts.append(placement.share.of_gpu(placement.gpus[0]))
    elif placement.gpus:
        text = "GPU" if len(placement.gpus) == 1 else "GPUs"
        text += " " + ",".join(str(g) for g in placement.gpus)
        link = _link_name(topology, placement.gpus) if topology is not None else ""
        parts.append(f"{text} {link}".strip())
    if placement.mig and topology is not None:
        names = []
        for gpu, gi in placement.mig:
            profile = next(
                (i.profile for i in topology.gpus[gpu].mig_instances if i.gi_id == gi), "MIG"
            )
            names.append(f"{profile} on GPU {gpu}")
        parts.append("MIG " + ", ".join(names))
    if placement.numa:
        parts.append("NUMA " + ",".join(str(n) for n in placement.numa))
    if topology is not None and len(placement.gpus) > 1:
        # Why these GPUs and not others: degraded NVLink pairs, GPUs not offered (docs/health.md)
        parts.extend(health_notes(topology)[:2])
    detail = f" ({'; '.join(parts)})" if parts else ""
    return f"Successfully assigned {pod.key} to {decision.node}{detail}"
