"""Status conditions of AgentPools and ToolBindings (the Kubernetes condition shape), merged so
``lastTransitionTime`` moves only when a condition's status does."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Condition", "merge_conditions", "transitions"]


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""


def merge_conditions(
    old: Iterable[Mapping[str, Any]], new: Iterable[Condition], now: str
) -> list[dict[str, Any]]:
    """The conditions to write: ``new`` ones replace those of the same type (keeping the old
    transition time when the status is unchanged); old types not in ``new`` stay."""
    before = {str(c.get("type")): dict(c) for c in old}
    out = dict(before)
    for cond in new:
        prev = before.get(cond.type)
        since = (
            prev.get("lastTransitionTime") if prev and prev.get("status") == cond.status else None
        )
        out[cond.type] = {
            "type": cond.type,
            "status": cond.status,
            "reason": cond.reason,
            "message": cond.message,
            "lastTransitionTime": since or now,
        }
    return [out[k] for k in sorted(out)]


def transitions(old: Iterable[Mapping[str, Any]], new: Iterable[Condition]) -> list[Condition]:
    """Conditions whose status or reason changed (each worth one Event)."""
    before = {str(c.get("type")): c for c in old}
    changed = []
    for cond in new:
        prev = before.get(cond.type)
        if prev is None or prev.get("status") != cond.status or prev.get("reason") != cond.reason:
            changed.append(cond)
    return changed
