"""Volcano's and KAI's PodGroup objects, read as scheduler-plugins' PodGroup is.

* Volcano: ``PodGroup`` ``scheduling.volcano.sh/v1beta1``, named by a pod's annotation
  ``scheduling.k8s.io/group-name``. Size: ``spec.minMember``.
* KAI Scheduler: ``PodGroup`` ``scheduling.run.ai/v2alpha2``, named by a pod's annotation
  ``pod-group-name``. Size: ``spec.minMember`` (absent: 1, as KAI reads it); with
  ``spec.subGroups`` the sum of the leaf subgroups' ``minMember`` (KAI places every leaf subgroup's
  minimum; Topos holds the whole gang to that sum).

Neither object has a timeout: a member's ``topos.io/gang-timeout`` annotation applies, as for the
Topos labels. Topos has no queues, so ``spec.queue`` is read only to say, once per PodGroup, that
it is ignored (:func:`ignored`), with the other fields Topos does not honour.

Their status is written back in their own fields (docs/gangs.md, "Status on PodGroup objects"):
:func:`volcano_status` (``phase``, ``running``, ``succeeded``, ``failed``, ``conditions`` of types
``Scheduled`` / ``Unschedulable``) and :func:`kai_status` (``schedulingConditions``: one
``UnschedulableOnNodePool`` while the gang does not fit, none once it is placed, as KAI's
scheduler writes them). Pure: the glue passes the member counts, the gang manager's message and
the time as text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from common import podkeys
from coordinator.core.gangs.groupstatus import MemberCounts
from coordinator.core.podspec.gangkeys import member_count

__all__ = [
    "KAI",
    "KINDS",
    "VOLCANO",
    "ForeignKind",
    "foreign_group_key",
    "ignored",
    "kai_status",
    "min_member",
    "volcano_phase",
    "volcano_status",
]

_MESSAGE_MAX: Final = 32_768


@dataclass(frozen=True, slots=True)
class ForeignKind:
    """One other scheduler's PodGroup API."""

    source: str  # the gang source its members declare ("volcano" | "kai")
    group: str  # API group
    version: str
    annotation: str  # the pod annotation naming the PodGroup

    @property
    def api(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def prefix(self) -> str:
        """Where these PodGroups sit in the gangs' ``podgroups`` mapping (see
        :func:`foreign_group_key`)."""
        return self.group + "/"


VOLCANO: Final = ForeignKind(
    "volcano", "scheduling.volcano.sh", "v1beta1", podkeys.POD_GROUP_VOLCANO.canonical
)
KAI: Final = ForeignKind("kai", "scheduling.run.ai", "v2alpha2", podkeys.POD_GROUP_KAI.canonical)
KINDS: Final = {k.source: k for k in (VOLCANO, KAI)}


def foreign_group_key(kind: ForeignKind, namespace: str, name: str) -> tuple[str, str]:
    """The ``podgroups`` key of ``kind``'s PodGroup ``namespace/name``: Kubernetes names hold no
    ``/``, so these keys never meet another API's."""
    return (namespace, kind.prefix + name)


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _subgroups(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = spec.get("subGroups")
    return [g for g in raw if isinstance(g, Mapping)] if isinstance(raw, list) else []


def min_member(kind: ForeignKind, obj: Mapping[str, Any], what: str) -> int | str:
    """The gang size ``obj`` asks for, or a message naming the field and its value (``what``
    names the object)."""
    spec = _spec(obj)
    subgroups = _subgroups(spec) if kind is KAI else []
    if subgroups:
        parents = {g.get("parent") for g in subgroups}
        leaves = [g for g in subgroups if g.get("name") not in parents]
        total = 0
        for g in leaves:
            n = g.get("minMember")
            if n is None:
                continue  # KAI reads an absent subgroup minimum as 0
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                return f"{what} spec.subGroups[{g.get('name')}].minMember: got {n!r}"
            total += n
        try:
            return member_count(total)
        except ValueError as exc:
            return f"{what} spec.subGroups[].minMember (their sum): {exc}"
    raw = spec.get("minMember")
    if raw is None and kind is KAI:
        return 1  # KAI: a PodGroup without minMember needs one pod
    try:
        return member_count(raw)
    except ValueError as exc:
        return f"{what} spec.minMember: {exc}"


def ignored(kind: ForeignKind, obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """The one Event Topos posts about ``obj``'s fields it does not honour, as ``(reason,
    message)``; ``None`` when there are none. A named queue comes first: Topos has no queues."""
    spec = _spec(obj)
    fields: list[str] = []
    if kind is VOLCANO:
        fields += [f"spec.{f}" for f in ("minResources", "minTaskMember") if spec.get(f)]
        fields += [f"spec.{f}" for f in ("networkTopology", "subGroupPolicy") if spec.get(f)]
    else:
        subgroups = _subgroups(spec)
        if subgroups:
            fields.append("spec.subGroups (their leaves' minMember are placed as one gang)")
        if any((spec.get("topologyConstraint") or {}).values()):
            fields.append("spec.topologyConstraint")
        if any(g.get("topologyConstraint") for g in subgroups):
            fields.append("spec.subGroups[].topologyConstraint")
        if spec.get("minSubGroup") is not None or any(
            g.get("minSubGroup") is not None for g in subgroups
        ):
            fields.append("minSubGroup (every subgroup is required)")
    rest = f"not honoured either: {', '.join(fields)}" if fields else ""
    queue = spec.get("queue")
    if isinstance(queue, str) and queue:
        message = (
            f"Topos has no queues: spec.queue={queue!r} is ignored and the gang is placed "
            "without it"
        )
        return "QueueIgnored", f"{message}; {rest}" if rest else message
    if rest:
        return "FieldsIgnored", f"Topos places this gang by its size; {rest}"
    return None


# --- status ---------------------------------------------------------------------------------------

#: The reason Volcano's gang plugin gives its ``Scheduled`` condition.
VOLCANO_SCHEDULED_REASON: Final = "tasks in gang are ready to be scheduled"


def volcano_phase(min_member: int, n: MemberCounts, unschedulable: bool) -> str:
    """Volcano's ``status.phase`` (its scheduler's ``getPodGroupPhase``, with no queue to wait
    in: a gang whose members all exist is ``Inqueue`` at once)."""
    if n.running and unschedulable and n.scheduled < min_member:
        return "Unknown"  # some members run, the rest cannot be placed
    if n.scheduled >= min_member:
        done = n.succeeded + n.failed
        return "Completed" if done and done >= n.scheduled else "Running"
    if n.pods >= min_member:
        return "Inqueue"
    return "Pending"


def _set_condition(
    conditions: Sequence[Mapping[str, Any]],
    kind: str,
    status: str,
    reason: str,
    message: str,
    now: str,
) -> list[dict[str, Any]]:
    """``conditions`` with the one of type ``kind`` saying this (the time moves with the status)."""
    message = message[:_MESSAGE_MAX]
    old = next((c for c in conditions if c.get("type") == kind), None)
    same = (status, reason, message)
    if old is not None and (old.get("status"), old.get("reason"), old.get("message")) == same:
        return [dict(c) for c in conditions]
    since = now
    if old is not None and old.get("status") == status:
        since = str(old.get("lastTransitionTime") or now)
    new = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }
    out = [new if c is old else dict(c) for c in conditions]
    return out if old is not None else [*out, new]


def volcano_status(
    min_member: int,
    n: MemberCounts,
    waiting: str | None,
    status: Mapping[str, Any],
    *,
    now: str,
) -> dict[str, Any] | None:
    """The fields of ``status`` that should change (``None``: none). ``waiting``: why the gang is
    not placed, from the gang manager."""
    conditions: list[dict[str, Any]] = [
        dict(c) for c in status.get("conditions") or [] if isinstance(c, Mapping)
    ]
    placed = n.scheduled >= min_member
    if placed:
        message = f"{n.scheduled} members bound (minimum {min_member})"
        conditions = _set_condition(
            conditions, "Scheduled", "True", VOLCANO_SCHEDULED_REASON, message, now
        )
        if any(c.get("type") == "Unschedulable" for c in conditions):
            conditions = _set_condition(
                conditions, "Unschedulable", "False", "Scheduled", message, now
            )
    elif waiting or n.pods < min_member:
        if n.pods < min_member:
            reason, message = "NotEnoughTasks", f"{n.pods} of {min_member} members exist"
        else:
            reason, message = "NotEnoughResources", str(waiting)
        conditions = _set_condition(conditions, "Unschedulable", "True", reason, message, now)
    unschedulable = any(
        c.get("type") == "Unschedulable" and c.get("status") == "True" for c in conditions
    )
    want: dict[str, Any] = {
        "phase": volcano_phase(min_member, n, unschedulable),
        "running": n.running,
        "succeeded": n.succeeded,
        "failed": n.failed,
        "conditions": conditions,
    }
    if not conditions:
        del want["conditions"]
    changed = {k: v for k, v in want.items() if (status.get(k) or 0) != (v or 0)}
    return changed or None


def kai_status(
    min_member: int,
    bound: int,
    waiting: str | None,
    status: Mapping[str, Any],
    *,
    now: str,
    node_pool: str = "default",
) -> dict[str, Any] | None:
    """KAI's ``status.schedulingConditions`` as its scheduler keeps them: one
    ``UnschedulableOnNodePool`` condition for the node pool while the gang cannot be placed (its
    ``transitionID`` counting up), none once it is; ``None`` when nothing should change. A
    ``schedulingConditions: None`` in the result removes them (a merge patch)."""
    old = [c for c in status.get("schedulingConditions") or [] if isinstance(c, Mapping)]
    if bound >= min_member:
        return {"schedulingConditions": None} if old else None
    if not waiting:
        return None
    message = waiting[:_MESSAGE_MAX]
    mine = next((c for c in old if c.get("nodePool") == node_pool), None)
    if mine is not None and (mine.get("status"), mine.get("message")) == ("True", message):
        return None
    last = 0
    for c in old:
        try:
            last = max(last, int(str(c.get("transitionID"))))
        except ValueError:
            continue
    condition = {
        "type": "UnschedulableOnNodePool",
        "nodePool": node_pool,
        "reason": "Unschedulable",
        "message": message,
        "reasons": [{"reason": "Unschedulable", "message": message}],
        "status": "True",
        "transitionID": str(last + 1),
        "lastTransitionTime": now,
    }
    others = [dict(c) for c in old if c.get("nodePool") != node_pool]
    return {"schedulingConditions": [*others, condition]}
