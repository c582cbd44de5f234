"""The last scheduling attempt of each pod, for ``/v1/pods/{ns}/{name}/explain``.

A decision's per-node verdicts are worked out when explain asks, from what the cycle saw: it
keeps the cycle's node list, the feasible nodes' memo entries and their scores — about 80 KiB at
5,000 nodes. Kept for every one of 10,000 attempts that was most of the coordinator's memory, so
only the newest ``detailed`` decisions keep them; an older one keeps the chosen node's verdict
and scores (and how many nodes were evaluated and feasible). A failure keeps its reasons.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from coordinator.core.framework.cycle import UNSCORED
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.results import Decision, NodeVerdict, ScheduleResult
from coordinator.core.status import SUCCESS
from coordinator.engine.observer import Outcome

__all__ = ["Attempt", "AttemptLog", "brief"]


@dataclass(frozen=True, slots=True)
class Attempt:
    """The latest scheduling attempt of one pod (what explain shows)."""

    pod_key: str
    uid: str
    at: float  # wall-clock seconds
    outcome: Outcome
    result: ScheduleResult
    message: str
    #: The profile (``schedulerName``) that decided.
    profile: str = ""


def brief(result: ScheduleResult) -> ScheduleResult:
    """A decision with only the chosen node's verdict (and no cycle state); a failure as is."""
    if not isinstance(result, Decision):  # (len(verdicts) would work every node's verdict out)
        return result
    status = UNSCORED if result.feasible == 1 else SUCCESS  # the only node that fit: unscored
    chosen = NodeVerdict(status, dict(result.breakdown), result.score)
    d = result  # every field but the verdicts and the state (dataclasses.replace: twice the cost)
    return Decision(
        pod_key=d.pod_key,
        node=d.node,
        placement=d.placement,
        device_ids=d.device_ids,
        score=d.score,
        breakdown=d.breakdown,
        verdicts={d.node: chosen},
        evaluated=d.evaluated,
        feasible=d.feasible,
        claims=d.claims,
        volumes=d.volumes,
        state=CycleState(),
    )


class AttemptLog:
    """At most ``kept`` attempts by pod UID (the oldest dropped first), the newest ``detailed``
    decisions with every node's verdict."""

    def __init__(self, *, kept: int, detailed: int) -> None:
        self._kept = kept
        self._detailed = detailed
        self._by_uid: collections.OrderedDict[str, Attempt] = collections.OrderedDict()
        self._named: dict[str, str] = {}  # pod key → uid of its latest attempt (explain by name)
        self._full: collections.OrderedDict[str, None] = collections.OrderedDict()  # uids

    def __len__(self) -> int:
        return len(self._by_uid)

    def record(self, attempt: Attempt) -> None:
        uid = attempt.uid
        self._by_uid[uid] = attempt
        self._by_uid.move_to_end(uid)
        self._named[attempt.pod_key] = uid
        if isinstance(attempt.result, Decision):
            self._full[uid] = None
            self._full.move_to_end(uid)
            while len(self._full) > self._detailed:
                self._shorten(self._full.popitem(last=False)[0])
        else:
            self._full.pop(uid, None)
        while len(self._by_uid) > self._kept:
            self.forget(next(iter(self._by_uid)))

    def _shorten(self, uid: str) -> None:
        old = self._by_uid.get(uid)
        if old is not None:
            o = old  # (no dataclasses.replace: a decision is shortened at every one recorded)
            self._by_uid[uid] = Attempt(
                pod_key=o.pod_key,
                uid=o.uid,
                at=o.at,
                outcome=o.outcome,
                result=brief(o.result),
                message=o.message,
                profile=o.profile,
            )

    def forget(self, uid: str) -> None:
        old = self._by_uid.pop(uid, None)
        self._full.pop(uid, None)
        if old is not None and self._named.get(old.pod_key) == uid:
            del self._named[old.pod_key]

    def last(self, pod_key: str) -> Attempt | None:
        """The latest attempt of the newest pod tried under ``namespace/name``."""
        uid = self._named.get(pod_key)
        return None if uid is None else self._by_uid.get(uid)
