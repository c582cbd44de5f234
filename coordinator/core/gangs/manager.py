"""The gang manager: all-or-nothing bookkeeping for pod groups, pure, with an injected clock.

Like scheduler-plugins' Coscheduling manager, minus the informers: the glue tells it what it sees
(``observe`` / ``remove`` pods), what the whole-gang planner reserved (``reserve``), what bound
(``bound``), and asks it what to do (``Allow`` these pods to bind, or ``Reject``). It never reads
the cluster and never sleeps; time comes from ``clock()``. Unlike Coscheduling there is no
member-at-a-time path: a gang is reserved whole or not at all (docs/gangs.md).

Life of a gang::

    PENDING   fewer than min members exist yet; nothing is held
    WAITING   min members exist; fewer than min hold reservations (or the last plan failed)
    RESERVED  min members hold reservations: they are released together for binding
    BOUND     min members are bound; later members schedule one by one, without waiting
    TIMED_OUT the timeout passed before the gang was bound: every reservation was released and
              the gang sits out ``backoff_s`` before it is tried again

Fairness (documented in docs/gangs.md):

* A gang that is not complete holds no capacity: the planner reserves all min members in one step
  or none, so a waiting gang never blocks smaller work, and two gangs planned one after the other
  cannot deadlock (the second simply does not fit).
* Every reservation held by a gang that has not bound expires with the gang's timeout.

A gang's state ends when its last member is gone (deleted, finished): a new run under the same
name starts from nothing — and a new run of a workload has a new :class:`GangKey` anyway (the
workload's UID is part of it). Members that declare different minimums do not bind until they
agree — members not bound yet, that is: a bound member's minimum is what its run started with,
and a workload resized since (a Job scaled from 2 to 3) declares its new size on its new pods. A
released gang never evicts a bound member that has no controller (``bare``): nothing
would create it again, so it stays bound, counts as placed, and the rest complete around it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from coordinator.core.domains.capacity import Resources
from coordinator.core.gangs.identity import DEFAULT_TIMEOUT_S, GangKey, GangSpec


class Phase(enum.Enum):
    PENDING = "Pending"
    WAITING = "Waiting"
    RESERVED = "Reserved"
    BOUND = "Bound"
    TIMED_OUT = "TimedOut"


@dataclass(frozen=True, slots=True, kw_only=True)
class Reservation:
    """Capacity held for one member until it binds: a node, the devices, the requests."""

    pod: str  # "namespace/name"
    node: str
    gpus: tuple[str, ...] = ()
    requests: Resources = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Allow:
    """Bind these pods now (all of them; they were released together)."""

    pods: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Reject:
    """The gang gave up this attempt: ``released`` capacity is free again; ``evict`` lists members
    that were bound while the gang never completed (the glue evicts them so no gang is left
    partly running)."""

    message: str
    released: tuple[Reservation, ...] = ()
    evict: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # bound bare pods left bound (no controller would recreate them)


Verdict = Allow | Reject


@dataclass(frozen=True, slots=True, kw_only=True)
class GangStatus:
    """What ``GET /v1/gangs`` shows for one gang."""

    namespace: str
    name: str
    uid: str
    source: str
    phase: str
    min_member: int
    members: int
    reserved: int
    bound: int
    priority: int
    timeout_s: float
    first_seen: float
    deadline: float
    message: str
    problems: tuple[str, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    placement: str = ""  # why the last plan chose its nodes (link class, domain, strategy)

    @property
    def key(self) -> GangKey:
        return GangKey(self.namespace, self.name, self.uid)


@dataclass(slots=True)
class _Gang:
    spec: GangSpec
    first_seen: float
    min_member: int
    joined: float  # when the newest member joined
    timeout_s: float
    members: set[str] = field(default_factory=set)
    mins: dict[str, int] = field(default_factory=dict)  # member → the minimum it declares
    bare: set[str] = field(default_factory=set)  # members with no controller
    priorities: dict[str, int] = field(default_factory=dict)
    reserved: dict[str, Reservation] = field(default_factory=dict)
    bound: set[str] = field(default_factory=set)
    placement: str = ""
    admitted: bool = False  # min members reached RESERVED at least once this attempt
    complete: bool = False  # min members bound
    backoff_until: float = 0.0
    last_failure: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def priority(self) -> int:
        return max(self.priorities.values(), default=0)

    @property
    def placed(self) -> int:
        return len(self.reserved) + len(self.bound)

    def waiting_mins(self) -> dict[str, int]:
        """The minimums of the members not bound yet: those that decide. A bound member's is what
        its run started with: a workload resized since (a Job scaled up) declares its new size on
        its new pods, and the bound members' old label must not strand them."""
        return {pod: n for pod, n in self.mins.items() if pod not in self.bound}

    def disagreement(self) -> str:
        """Empty when every member not bound yet declares the same minimum, else what they
        declare."""
        declared: dict[int, list[str]] = {}
        for pod, n in sorted(self.waiting_mins().items()):
            declared.setdefault(n, []).append(pod.rpartition("/")[2])
        if len(declared) < 2:
            return ""
        said = " and ".join(
            f"{n} ({', '.join(pods[:3])}{', …' if len(pods) > 3 else ''})"
            for n, pods in sorted(declared.items())
        )
        return f"members disagree on the minimum: {said}; none binds until they agree"

    def settle_min(self) -> None:
        """The gang's minimum: the one its members not bound yet declare (all bound: the
        largest any declares)."""
        mins = self.waiting_mins() or self.mins
        self.min_member = max(mins.values(), default=self.spec.min_member)
        note = self.disagreement()
        self.problems = [note] if note else []


class GangManager:
    """All-or-nothing state of every gang the coordinator knows about."""

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
        backoff_s: float = 10.0,
    ) -> None:
        self._clock = clock
        self._default_timeout = default_timeout_s
        self._backoff = backoff_s
        self._gangs: dict[GangKey, _Gang] = {}
        self._pod_gang: dict[str, GangKey] = {}

    # --- what the glue sees ---------------------------------------------------------------------
    def observe(
        self,
        pod: str,
        spec: GangSpec,
        *,
        priority: int = 0,
        bound: bool = False,
        bare: bool = False,
    ) -> None:
        """A member pod exists (pending, or already ``bound`` — e.g. after a restart); ``bare``:
        it has no controller, so evicting it would delete it for good."""
        gang = self._gangs.get(spec.key)
        now = self._clock()
        if gang is None:
            gang = _Gang(
                spec=spec,
                first_seen=now,
                joined=now,
                min_member=spec.min_member,
                timeout_s=spec.timeout_s or self._default_timeout,
            )
            self._gangs[spec.key] = gang
        old = self._pod_gang.get(pod)
        if old is not None and old != spec.key:
            self.remove(pod)
            self.observe(pod, spec, priority=priority, bound=bound, bare=bare)
            return
        self._pod_gang[pod] = spec.key
        if pod not in gang.members:
            gang.joined = now
            gang.members.add(pod)
        gang.mins[pod] = spec.min_member
        if bare:
            gang.bare.add(pod)
        else:
            gang.bare.discard(pod)
        gang.priorities[pod] = priority
        if bound:
            gang.reserved.pop(pod, None)
            gang.bound.add(pod)
        gang.settle_min()
        if bound and len(gang.bound) >= gang.min_member:
            gang.complete = gang.admitted = True

    def remove(self, pod: str) -> Reject | None:
        """A member pod is gone. If it held a reservation of a gang that has not bound yet, the
        whole gang's reservations are released (all or nothing)."""
        key = self._pod_gang.pop(pod, None)
        if key is None:
            return None
        gang = self._gangs[key]
        gang.members.discard(pod)
        gang.priorities.pop(pod, None)
        gang.mins.pop(pod, None)
        gang.bare.discard(pod)
        gang.bound.discard(pod)
        gang.settle_min()
        held = gang.reserved.pop(pod, None)
        out: Reject | None = None
        if held is not None and not gang.complete:
            out = self._release(gang, f"member {pod} was deleted before the group was bound")
            out = Reject(out.message, (held, *out.released), out.evict)
        elif gang.complete and len(gang.bound) < gang.min_member:
            # A running gang lost a member (eviction for recovery, a crash): it re-forms. The
            # survivors count as placed; replacements are planned as a group with a fresh timeout.
            gang.complete = gang.admitted = False
            gang.first_seen = self._clock()
            gang.last_failure = (
                f"member {pod} is gone: {len(gang.bound)}/{gang.min_member} members bound"
            )
        if not gang.members:
            del self._gangs[key]
        return out

    # --- what the scheduling loop asks -----------------------------------------------------------
    def gang_of_pod(self, pod: str) -> GangKey | None:
        return self._pod_gang.get(pod)

    def ready_to_plan(self, key: GangKey) -> bool:
        """Min members exist, none of the gang's attempt is in flight, and no backoff is due."""
        gang = self._gangs.get(key)
        if gang is None or gang.complete or gang.admitted or gang.problems:
            return False
        if self._clock() < gang.backoff_until:
            return False
        return len(gang.members) >= gang.min_member

    def arriving(self, key: GangKey, *, quiet_s: float, within_s: float) -> bool:
        """Fewer than min members exist and more may be on their way: the newest joined less
        than ``quiet_s`` ago and the gang's timeout began less than ``within_s`` ago. Its
        members are not told yet that they wait for the others (docs/gangs.md, "What happens to
        a gang member")."""
        gang = self._gangs.get(key)
        if gang is None or gang.complete or gang.problems or len(gang.members) >= gang.min_member:
            return False
        now = self._clock()
        return now - gang.joined < quiet_s and now - gang.first_seen < within_s

    def disagreement(self, key: GangKey) -> str:
        """Why the gang's members may not bind (they declare different minimums), or ``""``."""
        gang = self._gangs.get(key)
        return "" if gang is None else gang.disagreement()

    def is_bare(self, pod: str) -> bool:
        """The member has no controller: evicting it would delete it for good."""
        key = self._pod_gang.get(pod)
        return key is not None and pod in self._gangs[key].bare

    def find(self, namespace: str, name: str) -> list[GangKey]:
        """Every run of the gang ``namespace/name`` known now, the newest first."""
        found = [k for k in self._gangs if (k.namespace, k.name) == (namespace, name)]
        return sorted(found, key=lambda k: -self._gangs[k].first_seen)

    def unplaced(self, key: GangKey) -> tuple[str, ...]:
        """Members with neither a reservation nor a bind, sorted."""
        gang = self._gangs.get(key)
        if gang is None:
            return ()
        return tuple(sorted(gang.members - gang.reserved.keys() - gang.bound))

    def placed_members(self, key: GangKey) -> tuple[str, ...]:
        """Members with a reservation or a bind, sorted."""
        gang = self._gangs.get(key)
        if gang is None:
            return ()
        return tuple(sorted(gang.reserved.keys() | gang.bound))

    def needed(self, key: GangKey) -> int:
        """How many more members must be placed before the gang may bind."""
        gang = self._gangs.get(key)
        return 0 if gang is None else max(0, gang.min_member - gang.placed)

    def reserve(
        self, key: GangKey, reservations: Iterable[Reservation], *, why: str = ""
    ) -> Verdict:
        """Hold capacity for a whole-gang plan: ``Allow`` every reserved member. Members of a gang
        that is already bound are allowed at once; a plan that places fewer than min members is
        refused and holds nothing. ``why`` (the plan's explanation) is kept for the messages."""
        gang = self._gangs.get(key)
        if gang is None:
            return Reject(f"pod group {key} is unknown")
        held = {r.pod: r for r in reservations}
        for pod in held:
            if pod not in gang.members:
                return Reject(f"pod {pod} is not a member of pod group {key}")
        new = {pod: r for pod, r in held.items() if pod not in gang.bound}
        placed = len(gang.reserved.keys() | new.keys()) + len(gang.bound)
        if not gang.complete and placed < gang.min_member:
            return Reject(
                f"pod group {key.name}: the plan places {placed}/{gang.min_member} members"
            )
        gang.reserved.update(new)
        if why:
            gang.placement = why
        if not gang.complete:
            gang.admitted = True
            gang.last_failure = ""
        return Allow(tuple(sorted(gang.reserved)))

    def bound(self, pod: str) -> None:
        """The bind of a released member succeeded."""
        key = self._pod_gang.get(pod)
        if key is None:
            return
        gang = self._gangs[key]
        gang.reserved.pop(pod, None)
        gang.bound.add(pod)  # a member: _pod_gang holds members only
        gang.settle_min()
        if len(gang.bound) >= gang.min_member:
            gang.complete = True

    def bind_failed(self, pod: str, reason: str) -> Reject | None:
        """A released member could not bind: the gang's attempt is abandoned as a whole."""
        key = self._pod_gang.get(pod)
        if key is None:
            return None
        gang = self._gangs[key]
        if gang.complete:
            gang.reserved.pop(pod, None)
            return Reject(f"pod {pod} could not bind: {reason}")
        return self._release(gang, f"member {pod} could not bind: {reason}")

    def reject(self, key: GangKey, reason: str) -> Reject:
        """The planner found no room for the gang: release everything it holds, keep waiting."""
        gang = self._gangs.get(key)
        if gang is None:
            return Reject(f"pod group {key} is unknown")
        out = self._release(gang, reason, backoff=False)
        gang.last_failure = reason
        return out

    def tick(self) -> list[tuple[GangKey, Reject]]:
        """Expire gangs past their timeout that are not bound; returns what was released."""
        now = self._clock()
        out: list[tuple[GangKey, Reject]] = []
        for key in sorted(self._gangs):
            gang = self._gangs[key]
            if gang.complete or now < gang.backoff_until:
                continue
            if now >= self._deadline(gang):
                placed, need = gang.placed, gang.min_member
                msg = (
                    f"pod group {key.name} timed out after {gang.timeout_s:g}s: "
                    f"{placed}/{need} members placed"
                )
                out.append((key, self._release(gang, msg)))
        return out

    def next_timeout(self) -> float | None:
        """When :meth:`tick` may next release a gang (the clock's time), ``None``: no gang that is
        not bound can time out."""
        due = min((self._deadline(g) for g in self._gangs.values() if not g.complete), default=None)
        return None if due is None or math.isinf(due) else due

    def order_key(self, key: GangKey) -> tuple[int, float, str, str]:
        """Queue order: higher priority first, then first seen, then namespace/name."""
        gang = self._gangs.get(key)
        if gang is None:
            return (0, float("inf"), key.namespace, key.name)
        return (-gang.priority, gang.first_seen, key.namespace, key.name)

    def reservations(self) -> list[Reservation]:
        """Everything held and not yet bound: assume these in each cycle's snapshot."""
        return [r for g in self._gangs.values() for r in g.reserved.values()]

    # --- what users see -------------------------------------------------------------------------
    def message(self, key: GangKey, *, live: bool = True) -> str:
        """What the gang is doing, in words. While members are missing ``live`` says how many
        exist now ("3 of 8 pods exist": the PodGroup's status); without it the words stay the
        same from the first member to the last ("waiting for all 8 pods to exist": what each
        member is told once, in its condition and Event)."""
        gang = self._gangs.get(key)
        if gang is None:
            return f"pod group {key} is unknown"
        name = key.name
        if gang.problems and not gang.complete:
            return f"pod group {name}: {gang.problems[0]}"
        if gang.complete:
            text = f"pod group {name}: {len(gang.bound)}/{gang.min_member} members bound"
            return f"{text} on {gang.placement}" if gang.placement else text
        text = f"waiting for pod group {name}: {gang.placed}/{gang.min_member} members placed"
        if len(gang.members) < gang.min_member:
            if live:
                text += f" ({len(gang.members)} of {gang.min_member} pods exist)"
            else:
                text += f" (waiting for all {gang.min_member} pods to exist)"
        if gang.last_failure:
            text += f"; {gang.last_failure}"
        return text

    def status(self, key: GangKey) -> GangStatus | None:
        gang = self._gangs.get(key)
        if gang is None:
            return None
        return GangStatus(
            namespace=key.namespace,
            name=key.name,
            uid=key.uid,
            source=gang.spec.source,
            phase=self._phase(gang).value,
            min_member=gang.min_member,
            members=len(gang.members),
            reserved=len(gang.reserved),
            bound=len(gang.bound),
            priority=gang.priority,
            timeout_s=gang.timeout_s,
            first_seen=gang.first_seen,
            deadline=self._deadline(gang),
            message=self.message(key),
            problems=tuple(gang.problems),
            reservations=tuple(sorted(gang.reserved.values(), key=lambda r: r.pod)),
            placement=gang.placement,
        )

    def statuses(self) -> list[GangStatus]:
        out = [self.status(k) for k in sorted(self._gangs, key=self.order_key)]
        return [s for s in out if s is not None]

    # --- internals ------------------------------------------------------------------------------
    def _phase(self, gang: _Gang) -> Phase:
        if gang.complete:
            return Phase.BOUND
        if self._clock() < gang.backoff_until:
            return Phase.TIMED_OUT
        if gang.admitted:
            return Phase.RESERVED
        if len(gang.members) < gang.min_member:
            return Phase.PENDING
        return Phase.WAITING

    def _deadline(self, gang: _Gang) -> float:
        return gang.first_seen + gang.timeout_s

    def _release(self, gang: _Gang, message: str, *, backoff: bool = True) -> Reject:
        released = tuple(sorted(gang.reserved.values(), key=lambda r: r.pod))
        evict: tuple[str, ...] = ()
        kept: tuple[str, ...] = ()
        if not gang.complete:
            evict = tuple(sorted(gang.bound - gang.bare))
            kept = tuple(sorted(gang.bound & gang.bare))
        gang.reserved.clear()
        gang.admitted = False
        now = self._clock()
        if backoff:
            gang.backoff_until = now + self._backoff
            gang.first_seen = gang.backoff_until  # a fresh timeout for the next attempt
            gang.last_failure = message
            # Members bound by an attempt that never completed are evicted by the glue; they are
            # no longer counted as bound. Bare ones stay bound (nothing would recreate them).
            gang.bound.difference_update(evict)
            gang.settle_min()
        return Reject(message, released, evict, kept)


__all__ = [
    "Allow",
    "GangManager",
    "GangStatus",
    "Phase",
    "Reject",
    "Reservation",
    "Verdict",
]
