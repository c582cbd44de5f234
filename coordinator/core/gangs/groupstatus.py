"""What a PodGroup object's status says about its gang, for the two PodGroup APIs Topos reads.

scheduler-plugins' ``PodGroup`` (``scheduling.x-k8s.io/v1alpha1``) gets a phase and member counts
(:func:`group_phase`, computed from the member pods alone, as that project's controller does) and
a ``PodGroupScheduled`` condition; the Workload API's ``PodGroup``
(``scheduling.k8s.io/v1alpha2``) gets only that condition, with the reasons the API defines
(``Scheduled`` when True, ``Unschedulable`` when False).

Phases, in the order they are checked (docs/gangs.md, "Status on PodGroup objects"):

    Finished    at least minMember members succeeded
    Failed      a member failed and fewer than minMember members are running or succeeded
    Running     at least minMember members are running or succeeded
    Scheduled   at least minMember members are bound to nodes
    Scheduling  at least minMember members exist; the gang is being placed (or does not fit:
                the condition says why)
    Pending     fewer than minMember members exist

Pure: the glue passes the counts, the gang manager's message and the time as text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "SCHEDULED_CONDITION",
    "MemberCounts",
    "Scheduled",
    "group_phase",
    "scheduled_condition",
    "with_condition",
]

SCHEDULED_CONDITION: Final = "PodGroupScheduled"
REASON_SCHEDULED: Final = "Scheduled"
REASON_UNSCHEDULABLE: Final = "Unschedulable"
_MESSAGE_MAX: Final = 32_768  # metav1.Condition's limit


@dataclass(frozen=True, slots=True)
class MemberCounts:
    """A gang's member pods as the API server shows them."""

    pods: int = 0  # members that exist, in any phase
    scheduled: int = 0  # bound to a node (finished ones included)
    running: int = 0
    succeeded: int = 0
    failed: int = 0


def group_phase(min_member: int, n: MemberCounts) -> str:
    """The scheduler-plugins ``status.phase`` for these members."""
    if n.succeeded >= min_member:
        return "Finished"
    if n.failed and n.running + n.succeeded < min_member:
        return "Failed"
    if n.running + n.succeeded >= min_member:
        return "Running"
    if n.scheduled >= min_member:
        return "Scheduled"
    if n.pods >= min_member:
        return "Scheduling"
    return "Pending"


@dataclass(frozen=True, slots=True)
class Scheduled:
    """The ``PodGroupScheduled`` condition's content (times are added by :func:`with_condition`)."""

    status: bool
    reason: str
    message: str


def scheduled_condition(min_member: int, bound: int, waiting: str | None) -> Scheduled | None:
    """True once ``min_member`` members are bound; False with the gang's message (``waiting``:
    why it is not placed, from the gang manager) while it is not; ``None`` when there is nothing
    to say yet."""
    if bound >= min_member:
        return Scheduled(True, REASON_SCHEDULED, f"{bound} members bound (minimum {min_member})")
    if waiting:
        return Scheduled(False, REASON_UNSCHEDULABLE, waiting[:_MESSAGE_MAX])
    return None


def _same(condition: Mapping[str, Any], want: Scheduled) -> bool:
    return (
        condition.get("status") == ("True" if want.status else "False")
        and condition.get("reason") == want.reason
        and condition.get("message") == want.message
    )


def with_condition(
    conditions: Sequence[Mapping[str, Any]],
    want: Scheduled,
    *,
    now: str,
    generation: int | None = None,
) -> list[dict[str, Any]] | None:
    """``conditions`` with ``PodGroupScheduled`` set to ``want``, or ``None`` when it already
    says that. Other conditions are kept; the transition time moves only when the status does."""
    old = next((c for c in conditions if c.get("type") == SCHEDULED_CONDITION), None)
    if old is not None and _same(old, want):
        return None
    status = "True" if want.status else "False"
    moved = old is None or old.get("status") != status
    condition: dict[str, Any] = {
        "type": SCHEDULED_CONDITION,
        "status": status,
        "reason": want.reason,
        "message": want.message,
        "lastTransitionTime": now if moved or old is None else old.get("lastTransitionTime", now),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    out = [condition if c is old else dict(c) for c in conditions]
    return out if old is not None else [*out, condition]
