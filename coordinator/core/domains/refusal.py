"""Why a gang does not fit: every node's reason counted like kube-scheduler, and what the
members need against what the eligible nodes have free."""

from __future__ import annotations

from typing import Final

from coordinator.core.domains.capacity import GPU, shortfall
from coordinator.core.domains.packing import Packing
from coordinator.core.status import Code, Status, summarize

__all__ = ["GANG_APART", "format_amount", "refusal"]

GANG_APART: Final = "node(s) could not hold the pod group together with its siblings"


def format_amount(resource: str, amount: int) -> str:
    """``cpu`` millicores as cores, ``memory`` bytes as Gi/Mi, devices as counts."""
    if resource == "cpu":
        text = f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    elif resource == "memory" or resource.startswith("hugepages-"):
        if amount % 2**30 == 0:
            text = f"{amount // 2**30}Gi"
        elif amount % 2**20 == 0:
            text = f"{amount // 2**20}Mi"
        else:
            text = str(amount)
    else:
        text = str(amount)
    return f"{text} {resource}"


def refusal(ctx: Packing, scope: set[str], notes: list[str]) -> Status:
    """The Unschedulable (or, when every node is, UnschedulableAndUnresolvable) status of a
    placement that found no domain."""
    statuses: dict[str, Status] = dict(ctx.rejections)
    smallest = min(ctx.members, key=lambda m: (sum(m.requests.values()), m.name))
    for name in ctx.nodes:
        if name in statuses:
            continue
        if name not in scope:
            statuses[name] = Status.unschedulable("node(s) were not among the candidate nodes")
            continue
        short = shortfall(ctx.nodes[name].free, smallest.requests)
        if short:
            statuses[name] = Status.unschedulable(*(f"Insufficient {r}" for r in short))
        else:
            statuses[name] = Status.unschedulable(GANG_APART)
    free = ctx.free_sum(scope)
    names = sorted(ctx.demand, key=lambda k: (k != GPU, k))
    need = ", ".join(format_amount(k, ctx.demand[k]) for k in names)
    have = ", ".join(format_amount(k, free.get(k, 0)) for k in names)
    detail = f"{len(ctx.members)} pods need {need} together; eligible nodes have {have} free"
    if ctx.intent.single_spine and ctx.layout.spines:
        detail += "; a latency-sensitive or bandwidth-bound group must fit in one spine"
    if ctx.slice_miss is not None and not any(ctx.slice_miss.message in n for n in notes):
        notes = [*notes, ctx.slice_miss.message]
    if notes:
        detail += "; " + "; ".join(notes)
    every_unresolvable = (
        bool(ctx.rejections)
        and len(ctx.rejections) == len(ctx.nodes)
        and all(s.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE for s in ctx.rejections.values())
    )
    reasons = summarize(len(ctx.nodes), statuses).rstrip(".")
    if every_unresolvable:
        return Status.unresolvable(reasons, detail=detail)
    return Status.unschedulable(reasons, detail=detail)
