"""Allocate a pod's ResourceClaims on one node, as kube-scheduler's structured allocator does,
with the choice among eligible devices left to a :class:`DeviceChooser` (the DynamicResources
plugin chooses GPUs by topology; :class:`FirstFit` takes them in slice order).

Per claim, per request in order: the request's alternative (``exactly``, or the first
``firstAvailable`` entry that can be satisfied) takes ``count`` devices (``All``: every eligible
device, none of them taken) that the node reaches, no claim holds (admin access excepted),
no other request of this pod took, whose taints the request tolerates and that every selector
of the DeviceClass and of the request selects. ``matchAttribute`` constraints are met by trying
each value the first constrained request could take; ``distinctAttribute`` by taking devices
with unused values. A failure says which rule failed, naming the claim. A selector that fails
on a device at run time (:class:`~coordinator.core.dra.values.CelRuntimeError`) is no "not
selected": it fails the whole allocation with kube-scheduler's words (``claim <ns>/<name>:
selector #<i>: CEL runtime error: …``, ``class <name>: …`` for the DeviceClass's), then the
request and the device (:attr:`AllocationFailure.error`).

A device that allows multiple allocations (KEP-5075, :mod:`.capacity`) is never held whole: each
result is a share with a fresh ``shareID`` consuming part of its capacity, and it stays eligible
while what the claims' shares (and this pod's earlier requests) consume leaves room for the
request. The chooser picks among shareable candidates with :meth:`DeviceChooser.choose_shared`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple, Protocol

from coordinator.core.dra.capacity import format_quantity, left_after, share
from coordinator.core.dra.model import ClaimAllocation, DeviceId, DeviceResult
from coordinator.core.dra.objects import (
    AttributeValue,
    Constraint,
    Device,
    DeviceClass,
    DeviceRequest,
    ResourceClaim,
    SubRequest,
)
from coordinator.core.dra.state import DraState
from coordinator.core.dra.values import CelCompileError, CelRuntimeError, driver_only
from coordinator.core.podspec.tolerations import Taint, Toleration

__all__ = [
    "AllocationFailure",
    "DeviceChooser",
    "FirstFit",
    "SharedCandidate",
    "allocate",
    "check_claim",
    "claim_node",
    "selects",
    "taint_text",
]

#: kube's limit on ``status.reservedFor`` entries of one claim.
MAX_RESERVED: int = 256
#: matchAttribute values tried per request (largest groups first): bounds the search.
_MAX_VALUES: int = 16


@dataclass(frozen=True, slots=True)
class AllocationFailure:
    """Why the claims cannot be allocated here. ``unresolvable``: no preemption helps."""

    message: str
    unresolvable: bool = False
    detail: str = ""  # this node's numbers (the message is the same on alike nodes)
    #: a claim's or class's selector failed at run time: not this node's fault, and no node's
    #: (kube-scheduler aborts the pod's attempt with the message)
    error: bool = False


class _SelectorFailed(Exception):
    """A selector failed on a device: the whole allocation stops with this message."""


class SharedCandidate(NamedTuple):
    """An eligible device when some candidate is shareable: ``in_use`` — shares of it exist
    already; ``left`` — the smallest part of any of its capacities this request would leave
    (0 for an exclusive device, taken whole)."""

    device: Device
    in_use: bool
    left: Fraction


class DeviceChooser(Protocol):
    #: every device is usable and :meth:`choose` takes the first ``count`` candidates: the
    #: allocator may stop walking a node's devices at the first that fit
    first_fit: bool

    def usable(self, device: Device) -> bool:
        """Whether the node can give this device at all (e.g. a GPU no classic pod holds)."""
        ...

    def choose(self, candidates: Sequence[Device], count: int) -> Sequence[Device] | str:
        """``count`` of ``candidates`` (all eligible), or why no such set will do."""
        ...

    def choose_shared(
        self, candidates: Sequence[SharedCandidate], count: int
    ) -> Sequence[Device] | str:
        """``count`` distinct devices of ``candidates`` (some shareable), or why none will do."""
        ...


class FirstFit:
    """The devices in slice order (kube-scheduler's choice)."""

    first_fit = True

    def usable(self, device: Device) -> bool:
        return True

    def choose(self, candidates: Sequence[Device], count: int) -> Sequence[Device] | str:
        return candidates[:count]

    def choose_shared(
        self, candidates: Sequence[SharedCandidate], count: int
    ) -> Sequence[Device] | str:
        return [c.device for c in candidates[:count]]


def _tolerated(taint: Taint, tolerations: Sequence[Toleration]) -> bool:
    """Whether a request may get a device carrying ``taint``. ``NoSchedule`` and ``NoExecute``
    keep devices from requests without a matching toleration; any other effect (``None``, an
    informational taint, or one a newer API adds) does not — as kube-scheduler's allocator. Keys
    are free text: a key no one here knows is matched like any other."""
    if taint.effect not in ("NoSchedule", "NoExecute"):
        return True
    return any(t.tolerates(taint) for t in tolerations)


def taint_text(taint: Taint) -> str:
    """``nvidia.com/fabric=degraded:NoSchedule``, as kubectl prints a taint."""
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"


def selects(device: Device, expressions: Sequence[str]) -> bool:
    """Every CEL selector in ``expressions`` selects ``device``. Raises
    :class:`~coordinator.core.dra.values.CelCompileError` for one that does not compile and
    :class:`~coordinator.core.dra.values.CelRuntimeError` (its ``index`` in ``expressions``)
    for one that fails on the device; both are remembered, as results are."""
    for i, expr in enumerate(expressions):
        hit = device.memo.get(expr)
        if hit is None:
            driver = driver_only(expr)
            if driver is not None:
                hit = device.id.driver == driver
            else:
                from coordinator.core.dra.cel import compile_selector  # CEL loads on first use

                try:
                    hit = compile_selector(expr).matches(device.cel())
                except CelRuntimeError as bad:
                    hit = bad.error
            device.memo[expr] = hit
        if isinstance(hit, str):
            raise CelRuntimeError(hit, i)
        if not hit:
            return False
    return True


def _claim_label(claim: ResourceClaim) -> str:
    """The claim as kube-scheduler names it (``klog.KObj``)."""
    return f"claim {claim.namespace}/{claim.name}" if claim.name else "the extended-resource claim"


def _selected(state: DraState, claim: ResourceClaim, sub: SubRequest, device: Device) -> bool:
    """The DeviceClass's and the request's selectors select ``device`` (raises
    :class:`_SelectorFailed` when one fails on it)."""
    cls = _class(state, sub)
    try:
        if cls is not None and cls.selectors and not selects(device, cls.selectors):
            return False
    except CelRuntimeError as bad:
        raise _SelectorFailed(
            f"class {sub.class_name}: selector #{bad.index}: CEL runtime error: {bad.error} "
            f"(request {sub.name} of {_claim_label(claim)}, {_where(device)})"
        ) from None
    if not sub.selectors:
        return True
    try:
        return selects(device, sub.selectors)
    except CelRuntimeError as bad:
        raise _SelectorFailed(
            f"{_claim_label(claim)}: selector #{bad.index}: CEL runtime error: {bad.error} "
            f"(request {sub.name}, {_where(device)})"
        ) from None


def _where(device: Device) -> str:
    return f"device {device.id.device} in pool {device.id.pool}"


def check_claim(state: DraState, claim: ResourceClaim) -> AllocationFailure | None:
    """Pod-level checks of an unallocated claim: its classes exist, its selectors compile."""
    for request in claim.requests:
        missing = [a.class_name for a in request.alternatives if _class(state, a) is None]
        if len(missing) == len(request.alternatives):
            bad = state.rejection("DeviceClass", missing[0])
            why = f"is invalid: {bad.message}" if bad is not None else "not found"
            return AllocationFailure(f"device class {missing[0]} {why}", unresolvable=True)
        for alt in request.alternatives:
            cls = _class(state, alt)
            for source, exprs in (
                (f"device class {alt.class_name}", cls.selectors if cls else ()),
                (f"claim {claim.name}: request {alt.name}", alt.selectors),
            ):
                for i, expr in enumerate(exprs):
                    if driver_only(expr) is not None:
                        continue  # compiles; answered without loading CEL
                    from coordinator.core.dra.cel import compile_selector

                    try:
                        compile_selector(expr)
                    except CelCompileError as bad:
                        return AllocationFailure(
                            f"{source}: selector {i} does not compile: {bad}", unresolvable=True
                        )
    return None


def _class(state: DraState, sub: SubRequest) -> DeviceClass | None:
    return state.class_by_name.get(sub.class_name)


def claim_node(claim: ResourceClaim) -> str:
    """The node an allocated claim is bound to, for messages ("" when not one node)."""
    alloc = claim.allocation
    if alloc is None or not alloc.terms:
        return ""
    for term in alloc.terms:
        for req in (*term.match_fields, *term.match_expressions):
            if req.operator == "In" and len(req.values) == 1:
                return req.values[0]
    return ""


class _Allocator:
    def __init__(
        self,
        state: DraState,
        node: str,
        labels: Mapping[str, str],
        chooser: DeviceChooser,
    ) -> None:
        self.state = state
        reachable = state.devices_on(node, labels)
        free = state.free_on(node, labels)
        self.devices: Sequence[Device] = reachable
        #: the devices no claim holds whole (what a request without admin access may get)
        self.free: Sequence[Device] = free
        #: tainted devices the node cannot give anyway (a GPU Topos holds unhealthy, whose rule
        #: says so): counted in a refusal's taints, which say why more lastingly than "not free"
        self.withheld: Sequence[Device] = ()
        if not chooser.first_fit:  # and not held outside DRA
            self.devices = [d for d in reachable if chooser.usable(d)]
            self.free = [d for d in free if chooser.usable(d)]
            self.withheld = [d for d in reachable if d.taints and not chooser.usable(d)]
        #: a request without constraints may stop at the first devices that fit (the chooser
        #: takes them in order, and no device is shared, which would be chosen best-fit)
        self.first_fit = chooser.first_fit and not state.shareable
        self.chooser = chooser
        self.taken: set[DeviceId] = set()  # held whole by earlier requests of this pod
        #: what earlier requests of this pod consume of shared devices
        self.sharing: dict[DeviceId, dict[str, Fraction]] = {}
        #: (request, device) → what the request would consume of that device
        self.shares: dict[tuple[str, DeviceId], dict[str, Fraction]] = {}
        self.misfit: dict[str, tuple[str, bool]] = {}  # request → first capacity misfit
        #: request → devices passed over for a taint it does not tolerate, and the first taint
        self.tainted: dict[str, tuple[int, str]] = {}

    def used(self, device: DeviceId) -> dict[str, Fraction]:
        mine = self.sharing.get(device, {})
        base = self.state.used(device)
        return {n: base.get(n, Fraction(0)) + mine.get(n, Fraction(0)) for n in {*base, *mine}}

    def held(self) -> int:
        """How many of the node's devices claims hold (whole or shared)."""
        consumed = self.state.consumed
        shared = sum(d.id in consumed for d in self.free) if consumed else 0
        return len(self.devices) - len(self.free) + shared

    def eligible(self, claim: ResourceClaim, sub: SubRequest, enough: int = 0) -> list[Device]:
        """The devices ``sub`` may get here; with ``enough``, the first that many of them
        (what a refusal would count is then not counted)."""
        cls = _class(self.state, sub)
        if cls is None:
            return []
        out = []
        asked = dict(sub.capacity)
        self.misfit.pop(sub.name, None)
        self.tainted.pop(sub.name, None)
        taken = self.taken
        for d in self.devices if sub.admin_access else self.free:
            if taken and d.id in taken and not d.allow_multiple:
                continue
            bad = (
                next((t for t in d.taints if not _tolerated(t, sub.tolerations)), None)
                if d.taints
                else None
            )
            if bad is not None:
                if _selected(self.state, claim, sub, d):
                    n, first = self.tainted.get(sub.name, (0, self._taint_said(d, bad)))
                    self.tainted[sub.name] = (n + 1, first)
                continue
            if not _selected(self.state, claim, sub, d):
                continue
            if asked or d.allow_multiple:  # an exclusive device asked nothing: taken whole
                fit = share(d.consumable, asked, self.used(d.id) if d.allow_multiple else {})
                if isinstance(fit, tuple):
                    why, never = fit
                    seen = self.misfit.get(sub.name)
                    if seen is None or (never and not seen[1]):
                        self.misfit[sub.name] = (f"device {d.id.device}: {why}", never)
                    continue
                if d.allow_multiple:
                    self.shares[(sub.name, d.id)] = fit
            out.append(d)
            if len(out) == enough:
                return out
        for d in self.withheld:
            bad = next((t for t in d.taints if not _tolerated(t, sub.tolerations)), None)
            if bad is not None and _selected(self.state, claim, sub, d):
                n, first = self.tainted.get(sub.name, (0, self._taint_said(d, bad)))
                self.tainted[sub.name] = (n + 1, first)
        return out

    def _taint_said(self, device: Device, taint: Taint) -> str:
        """``gpu-0: key=value:NoSchedule``, and the DeviceTaintRule that put it there, if one."""
        rule = self.state.taint_rule(device.id, taint)
        said = f"{device.id.device}: {taint_text(taint)}"
        return f"{said} from DeviceTaintRule {rule}" if rule else said

    def hold(self, alt: SubRequest, devices: Sequence[Device]) -> None:
        """Count ``devices`` as this pod's (whole, or the share ``alt`` takes)."""
        if alt.admin_access:
            return
        for d in devices:
            if not d.allow_multiple:
                self.taken.add(d.id)
                continue
            used = self.sharing.setdefault(d.id, {})
            for name, amount in self.shares.get((alt.name, d.id), {}).items():
                used[name] = used.get(name, Fraction(0)) + amount

    def result(self, name: str, device: Device, admin: bool) -> DeviceResult:
        if not device.allow_multiple or admin:
            return DeviceResult(name, device.id, admin_access=admin)
        consumed = tuple(sorted(self.shares.get((name, device.id), {}).items()))
        return DeviceResult(name, device.id, consumed=consumed, share_id=str(uuid.uuid4()))

    def claim(
        self, claim: ResourceClaim, *, results: bool = True
    ) -> tuple[DeviceResult, ...] | str:
        """The claim's devices (held for this pod's later claims), or why none fit; with
        ``results`` False, ``()`` when they fit (nothing built for a node not chosen)."""
        plain = self._plain(claim)
        picked = self._requests(claim, list(claim.requests), {}) if plain is None else plain
        if isinstance(picked, str):
            return picked
        alternatives = {a.name: a for r in claim.requests for a in r.alternatives}
        for name, (devices, _) in picked.items():
            self.hold(alternatives[name], devices)
        if not results:
            return ()
        return tuple(
            self.result(name, d, admin)
            for name, (devices, admin) in picked.items()
            for d in devices
        )

    def _plain(self, claim: ResourceClaim) -> dict[str, tuple[list[Device], bool]] | None:
        """What :meth:`_requests` finds for a claim of plain requests — each one ``exactly``
        of whole devices (``ExactCount``, no capacity asked, no admin access), no constraints —
        when devices are taken first-fit: per request, the first ``count`` free devices its
        selectors select that no earlier request took, found without the general search
        (upstream's scheduler_perf claims, most claims). ``None`` when the claim is not plain,
        when a device walked has taints or allows multiple allocations, or when too few fit:
        the general search answers then, with its reasons."""
        if not self.first_fit or claim.constraints:
            return None
        out: dict[str, tuple[list[Device], bool]] = {}
        taken = set(self.taken)
        for request in claim.requests:
            if len(request.alternatives) != 1:
                return None
            alt = request.alternatives[0]
            if alt.mode != "ExactCount" or alt.admin_access or alt.capacity:
                return None
            got: list[Device] = []
            for d in self.free:
                if d.taints or d.allow_multiple:
                    return None
                if d.id in taken or not _selected(self.state, claim, alt, d):
                    continue
                got.append(d)
                if len(got) == alt.count:
                    break
            else:
                return None
            picked = self.chooser.choose(got, alt.count)
            if isinstance(picked, str) or len(picked) != alt.count:
                return None
            taken.update(d.id for d in picked)
            out[alt.name] = (list(picked), False)
        return out

    def _requests(
        self,
        claim: ResourceClaim,
        pending: list[DeviceRequest],
        chosen: dict[str, list[Device]],
    ) -> dict[str, tuple[list[Device], bool]] | str:
        """Depth-first over the requests; the first alternative/value that lets the rest fit."""
        if not pending:
            return {}
        request, rest = pending[0], pending[1:]
        why = ""
        first = self.first_fit and not _applying(claim.constraints, request.name)
        for alt in request.alternatives:
            candidates = self.eligible(claim, alt, alt.count if first and alt.mode != "All" else 0)
            for pinned, options in self._constrained(claim, request.name, candidates, chosen):
                picked = self._pick(alt, options, pinned, claim, request.name, chosen)
                if isinstance(picked, str):
                    why = why or picked
                    continue
                chosen[request.name] = list(picked)
                saved = set(self.taken), {d: dict(u) for d, u in self.sharing.items()}
                self.hold(alt, picked)
                tail = self._requests(claim, rest, chosen)
                self.taken, self.sharing = saved
                if isinstance(tail, dict):
                    return {alt.name: (list(picked), alt.admin_access), **tail}
                why = why or tail
                del chosen[request.name]
        return why or f"request {request.name}: no device matches"

    def _constrained(
        self,
        claim: ResourceClaim,
        request: str,
        candidates: list[Device],
        chosen: dict[str, list[Device]],
    ) -> list[tuple[str, list[Device]]]:
        """(the matchAttribute value pinned, the candidates left) options to try, in order."""
        options: list[tuple[str, list[Device]]] = [("", candidates)]
        for c in _applying(claim.constraints, request):
            if not c.match_attribute:
                continue
            attr = c.match_attribute
            earlier = [d for r, ds in chosen.items() if _in(c, r) for d in ds]
            next_options: list[tuple[str, list[Device]]] = []
            for pinned, devices in options:
                have = [d for d in devices if d.attribute(attr) is not None]
                if earlier:
                    value = earlier[0].attribute(attr)
                    next_options.append(
                        (f"{pinned} {attr}", [d for d in have if d.attribute(attr) == value])
                    )
                    continue
                groups: dict[AttributeValue, list[Device]] = {}
                for d in have:
                    groups.setdefault(d.attribute(attr), []).append(d)  # type: ignore[arg-type]
                ordered = sorted(groups.values(), key=lambda g: -len(g))[:_MAX_VALUES]
                next_options.extend((f"{pinned} {attr}".strip(), g) for g in ordered)
                if not groups:
                    next_options.append((f"{pinned} {attr}".strip(), []))
            options = next_options
        return options

    def _pick(
        self,
        alt: SubRequest,
        candidates: list[Device],
        pinned: str,
        claim: ResourceClaim,
        request: str,
        chosen: dict[str, list[Device]],
    ) -> Sequence[Device] | str:
        distinct = [c.distinct_attribute for c in _applying(claim.constraints, request)]
        distinct = [a for a in distinct if a]
        if alt.mode == "All":
            every = [d for d in self.devices if _selected(self.state, claim, alt, d)]
            if not every:
                return f"request {alt.name}: no device of class {alt.class_name} on this node"
            if len(every) != len(candidates):
                return f"request {alt.name}: not all devices of class {alt.class_name} are free"
            return candidates
        need = alt.count
        if len(candidates) < need:
            what = f"with matching {pinned.strip()}" if pinned.strip() else "free"
            tainted = self.tainted.get(alt.name)
            if tainted is not None and not pinned.strip():
                # KEP-5055: a taint written by a driver or an operator (a fabric error, upkeep)
                return (
                    f"no {_count(need)} of class {alt.class_name} free on this node: "
                    f"{tainted[0]} tainted and not tolerated (device {tainted[1]})"
                )
            misfit = self.misfit.get(alt.name)
            if misfit is not None and not pinned.strip():
                what = "that fits" if misfit[1] else "with enough capacity left"
                return (
                    f"no {_count(need)} of class {alt.class_name} {what} on this node "
                    f"({misfit[0] if misfit[1] else _asked(alt)})"
                )
            return f"no {_count(need)} of class {alt.class_name} {what} on this node"
        if distinct:
            used = {a: {d.attribute(a) for r, ds in chosen.items() for d in ds} for a in distinct}
            picked: list[Device] = []
            for d in candidates:
                values = {a: d.attribute(a) for a in distinct}
                if any(v is None or v in used[a] for a, v in values.items()):
                    continue
                picked.append(d)
                for a, v in values.items():
                    used[a].add(v)
                if len(picked) == need:
                    return picked
            return f"no {_count(need)} of class {alt.class_name} with distinct {distinct[0]}"
        if alt.admin_access:
            return candidates[:need]  # monitoring access holds nothing: no set to optimise
        if any(d.allow_multiple for d in candidates):
            return self.chooser.choose_shared([self._candidate(alt, d) for d in candidates], need)
        return self.chooser.choose(candidates, need)

    def _candidate(self, alt: SubRequest, device: Device) -> SharedCandidate:
        if not device.allow_multiple:
            return SharedCandidate(device, False, Fraction(0))
        used = self.used(device.id)
        taking = self.shares.get((alt.name, device.id), {})
        return SharedCandidate(device, bool(used), left_after(device.consumable, used, taking))


def _in(c: Constraint, request: str) -> bool:
    return not c.requests or request in c.requests


def _applying(constraints: Sequence[Constraint], request: str) -> Sequence[Constraint]:
    if not constraints:  # the common case: no list built per node per request
        return ()
    return [c for c in constraints if _in(c, request)]


def _config(
    state: DraState, claim: ResourceClaim, results: Sequence[DeviceResult]
) -> tuple[Mapping[str, Any], ...]:
    """status.allocation.devices.config: the classes' config, then the claim's."""
    out: list[Mapping[str, Any]] = []
    by_class: dict[str, list[str]] = {}
    alternatives = {a.name: a for r in claim.requests for a in r.alternatives}
    for r in results:
        alt = alternatives.get(r.request)
        if alt is not None and r.request not in by_class.setdefault(alt.class_name, []):
            by_class[alt.class_name].append(r.request)
    for class_name, requests in by_class.items():
        cls = state.class_by_name.get(class_name)
        for entry in cls.config if cls else ():
            out.append({"source": "FromClass", "requests": requests, **entry})
    for entry in claim.config:
        out.append({"source": "FromClaim", **entry})
    return tuple(out)


def allocate(
    state: DraState,
    claims: Sequence[ResourceClaim],
    node: str,
    labels: Mapping[str, str],
    chooser: DeviceChooser,
    *,
    pod_uid: str = "",
    spec_of: Callable[[ResourceClaim], Mapping[str, Any] | None] = lambda _: None,
    extended_requests: tuple[tuple[str, str, str], ...] = (),
    check_only: bool = False,
) -> tuple[ClaimAllocation, ...] | AllocationFailure:
    """Allocate (or, when already allocated, check and reserve) every claim of one pod on
    ``node``. A claim ``spec_of`` gives a spec for is one to create (KEP-5004). ``check_only``:
    whether they fit, the same failure if not, ``()`` if they do (the allocations are not built:
    a cycle needs them for the node it chooses only)."""
    alloc = _Allocator(state, node, labels, chooser)
    out: list[ClaimAllocation] = []
    for claim in claims:
        label = f"claim {claim.name}" if claim.name else "extended resources"
        if claim.allocation is not None:
            if not claim.allocation.reaches(node, labels):
                where = claim_node(claim)
                return AllocationFailure(
                    f"{label} is allocated on node {where}"
                    if where
                    else f"{label} is allocated to other nodes",
                    unresolvable=True,
                )
            if len(claim.reserved_for) >= MAX_RESERVED and pod_uid not in claim.reserved_for:
                return AllocationFailure(
                    f"{label} is reserved for {MAX_RESERVED} pods (the limit)", unresolvable=True
                )
            alloc.taken.update(
                r.device for r in claim.allocation.results if not (r.admin_access or r.share_id)
            )
            if check_only:
                continue
            out.append(
                ClaimAllocation(
                    claim.namespace,
                    claim.name,
                    claim.uid,
                    claim.resource_version,
                    node,
                    claim.allocation.results,
                    reserve_only=True,
                )
            )
            continue
        try:
            results = alloc.claim(claim, results=not check_only)
        except _SelectorFailed as failed:
            return AllocationFailure(str(failed), unresolvable=True, error=True)
        if isinstance(results, str):
            unusable = "".join(f"; {p}" for p in state.problems_on(node, labels))
            return AllocationFailure(
                f"cannot allocate {label}: {results}{unusable}",
                detail=f"{len(alloc.devices)} devices reachable from node {node}, "
                f"{alloc.held()} allocated",
            )
        if check_only:
            continue
        spec = spec_of(claim)
        out.append(
            ClaimAllocation(
                claim.namespace,
                claim.name,
                claim.uid,
                claim.resource_version,
                node,
                results,
                config=_config(state, claim, results),
                spec=spec,
                extended_requests=extended_requests if spec is not None else (),
                finalizers=claim.finalizers,
            )
        )
    return tuple(out)


def _asked(alt: SubRequest) -> str:
    asked = ", ".join(f"{n} {format_quantity(q)}" for n, q in alt.capacity)
    return f"asking {asked}" if asked else "asking the default share"


def _count(n: int) -> str:
    return f"{n} device" if n == 1 else f"{n} devices"
