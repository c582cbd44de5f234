"""Whole-gang planning: decide every member of a gang at once, on a copy of the capacity.

:func:`plan_gang` is the atomic path of the gang manager: when min members exist, the glue plans
them in one step (network rules of :mod:`coordinator.core.domains.select`), reserves the
result in the :class:`~coordinator.core.gangs.manager.GangManager`, and releases the members
together for binding. No partial reservation is ever held, so a gang that does not fit
blocks nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from coordinator.core.domains.capacity import NodeState
from coordinator.core.domains.layout import DomainKeys, Layout
from coordinator.core.domains.packing import EligibleFn, Member, Placement
from coordinator.core.domains.select import place_members
from coordinator.core.domains.strategy import (
    IntentError,
    PlacementIntent,
    placement_intent,
)
from coordinator.core.gangs.manager import Reservation
from coordinator.core.status import Status


@dataclass(frozen=True, slots=True, kw_only=True)
class GangPlan:
    placement: Placement
    planned: tuple[str, ...]  # members with a place, sorted
    left_over: tuple[str, ...]  # members beyond min that did not fit; they wait for room

    def reservations(self, members: Sequence[Member]) -> list[Reservation]:
        """Reservations for the manager (devices are chosen later, per node, by the core)."""
        by_name = {m.name: m for m in members}
        return [
            Reservation(pod=name, node=node, requests=dict(by_name[name].requests))
            for name, node in self.placement.assignments
        ]


def plan_gang(
    members: Sequence[Member],
    nodes: Sequence[NodeState],
    *,
    min_member: int | None = None,
    intent: PlacementIntent | None = None,
    keys: DomainKeys | None = None,
    layout: Layout | None = None,
    eligible: EligibleFn | None = None,
    within: Iterable[str] | None = None,
) -> GangPlan | Status:
    """Place all members together; if that fails and ``min_member`` is smaller, place the first
    ``min_member`` members (by name) and leave the rest waiting. A ``Status`` says why not."""
    ordered = sorted(members, key=lambda m: m.name)
    if min_member is not None and len(ordered) < min_member:
        return Status.unschedulable(
            "pod group is incomplete",
            detail=f"{len(ordered)}/{min_member} members exist",
        )
    scope = None if within is None else list(within)
    result = place_members(
        ordered, nodes, intent=intent, keys=keys, layout=layout, eligible=eligible, within=scope
    )
    if isinstance(result, Placement):
        return GangPlan(placement=result, planned=tuple(m.name for m in ordered), left_over=())
    if min_member is None or min_member >= len(ordered):
        return result
    head = ordered[:min_member]
    partial = place_members(
        head, nodes, intent=intent, keys=keys, layout=layout, eligible=eligible, within=scope
    )
    if isinstance(partial, Placement):
        return GangPlan(
            placement=partial,
            planned=tuple(m.name for m in head),
            left_over=tuple(m.name for m in ordered[min_member:]),
        )
    return partial


def gang_intent(annotations: Iterable[Mapping[str, str]]) -> PlacementIntent | IntentError:
    """The placement intent of a gang: its members' annotations must agree."""
    found: PlacementIntent | None = None
    for ann in annotations:
        intent = placement_intent(ann)
        if isinstance(intent, IntentError):
            return intent
        if found is None:
            found = intent
        elif intent != found:
            return IntentError(
                "members of the pod group disagree on placement annotations: "
                f"{found.strategy.value}/{found.preferred_domain} and "
                f"{intent.strategy.value}/{intent.preferred_domain}"
            )
    return found or PlacementIntent()


__all__ = ["GangPlan", "gang_intent", "plan_gang"]
