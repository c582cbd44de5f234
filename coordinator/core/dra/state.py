"""The DRA objects one scheduling cycle sees: :class:`DraState`.

The adapters build a ``DraState`` from the watched objects, parsed with the ``parse_*``
functions (:mod:`.objects`); the DynamicResources plugin allocates from it. A state never
changes: :meth:`DraState.with_allocations` returns a new one with our in-flight allocations
counted.

Pools: only the slices of a pool's newest generation count; a pool with fewer slices of that
generation than ``resourceSliceCount`` is incomplete and not used (kube-scheduler waits too);
a pool naming one device twice is not used, with a reason (:attr:`DraState.problems`).

DeviceTaintRules (KEP-5055) add their taint to every device of a usable pool their selector
matches, as kube-scheduler's allocator sees them: the devices of :meth:`DraState.devices_on`
carry the slice's own taints, then the rules' (by rule name); :meth:`DraState.taint_rule` says
which rule put a taint on a device, for refusals.

Free devices: :meth:`DraState.free_on` lists a node's devices no claim holds whole, remembered
per node and carried to the next state for every node the changed claims' devices are not on
(a bind changes one node of hundreds); :meth:`DraState.nodes_with_free` names the nodes a slice
naming them gives such a device, from per-node counts kept the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import replace
from fractions import Fraction

from coordinator.core.dra.computedomains import ComputeDomain
from coordinator.core.dra.model import ClaimAllocation, DeviceId, DeviceResult
from coordinator.core.dra.objects import (
    Allocation,
    Device,
    DeviceClass,
    DeviceTaintRule,
    DraObjectError,
    ResourceClaim,
    ResourceSlice,
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_claim,
    parse_resource_slice,
)
from coordinator.core.podspec.selectors import NodeSelectorTerm, Requirement
from coordinator.core.podspec.tolerations import Taint

__all__ = [
    "EXTENDED_CLASS_PREFIX",
    "DeviceClass",
    "DeviceTaintRule",
    "DraObjectError",
    "DraState",
    "ResourceClaim",
    "ResourceSlice",
    "parse_device_class",
    "parse_device_taint_rule",
    "parse_resource_claim",
    "parse_resource_slice",
]

#: Every DeviceClass also serves the extended resource named this prefix + its name.
EXTENDED_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"


class DraState:
    """Every ResourceSlice, DeviceClass and ResourceClaim as of one cycle (immutable)."""

    def __init__(
        self,
        slices: Iterable[ResourceSlice] = (),
        classes: Iterable[DeviceClass] = (),
        claims: Iterable[ResourceClaim] = (),
        rejected: Iterable[DraObjectError] = (),
        rules: Iterable[DeviceTaintRule] = (),
        domains: Iterable[ComputeDomain] = (),
    ) -> None:
        """``rejected``: the objects left out because they do not parse (for explanations);
        ``domains``: NVIDIA ComputeDomains (:mod:`.computedomains`)."""
        self.slices = tuple(slices)
        #: ComputeDomain UID → its intended number of nodes (``spec.numNodes``), when known
        self.domain_nodes: dict[str, int] = {d.uid: d.num_nodes for d in domains if d.num_nodes}
        self.rules = tuple(sorted(rules, key=lambda r: r.name))
        self.classes = tuple(classes)
        self.claims = tuple(claims)
        self.class_by_name: dict[str, DeviceClass] = {c.name: c for c in self.classes}
        self.claim_by_key: dict[str, ResourceClaim] = {c.key: c for c in self.claims}
        #: extended resource name → DeviceClass name (explicit, then the implicit name)
        self.extended: dict[str, str] = {}
        for c in sorted(self.classes, key=lambda c: c.name):
            if c.extended_resource_name:
                self.extended.setdefault(c.extended_resource_name, c.name)
            self.extended.setdefault(EXTENDED_CLASS_PREFIX + c.name, c.name)
        #: (kind, key) → why that object is left out
        self.rejected: dict[tuple[str, str], DraObjectError] = {
            (e.kind, e.key): e for e in rejected
        }
        #: "driver/pool" → why the pool is not used
        self.problems: dict[str, str] = {}
        self._unusable: list[tuple[str, ResourceSlice]] = []  # (pool key, one of its slices)
        #: (device, taint) → the DeviceTaintRule that put it there
        self._rule_of: dict[tuple[DeviceId, Taint], str] = {}
        self._pool_slices = self._tainted(self._usable_pools())
        # slices naming their node, by node; the others are matched against each node's labels
        self._named: dict[str, list[ResourceSlice]] = {}
        self._selected: list[ResourceSlice] = []
        for s in self._pool_slices:
            if s.selection is not None and s.selection.node_name:
                self._named.setdefault(s.selection.node_name, []).append(s)
            else:
                self._selected.append(s)
        self._by_node: dict[str, tuple[Device, ...]] = {}
        self._by_id: dict[DeviceId, Device] | None = None
        #: the ids of the devices in slices naming each node, and in the others (nodes_holding)
        self._named_ids = {
            node: frozenset(d.id for s in slices for d in s.devices)
            for node, slices in self._named.items()
        }
        self._selected_ids = frozenset(d.id for s in self._selected for d in s.devices)
        #: the node of each device in a slice naming its node, and each such node's device count
        self._node_of = {d: node for node, ids in self._named_ids.items() for d in ids}
        self._named_size = {node: len(ids) for node, ids in self._named_ids.items()}
        #: some device allows multiple allocations (then a device no claim holds whole may
        #: still be shared: the allocator walks every candidate)
        self.shareable = any(d.allow_multiple for s in self._pool_slices for d in s.devices)
        self._free_cache()
        self._count_claims()

    def _count_claims(self) -> None:
        results = [
            r
            for c in self.claims
            if c.allocation is not None
            for r in c.allocation.results
            if not r.admin_access
        ]
        #: devices held whole (a share of a device allowing multiple allocations is not)
        whole = [r.device for r in results if not r.share_id]
        #: never changed once set (a new state gets its own): sets built for a new state are
        #: kept as they are, not copied again into frozensets (5,000 claims: a copy a change)
        self.allocated: AbstractSet[DeviceId] = frozenset(whole)
        #: some device is named by two claims (a later release may not free it)
        self._doubled = len(whole) != len(self.allocated)
        #: what the shares of each shared device consume together, by capacity name
        self.consumed: dict[DeviceId, dict[str, Fraction]] = {}
        _add_shares(self.consumed, results)
        self.held: AbstractSet[DeviceId] = (
            self.allocated | self.consumed.keys() if self.consumed else self.allocated
        )
        self._busy = Counter(n for d in self.allocated if (n := self._node_of.get(d)) is not None)

    def _free_cache(
        self,
        before: DraState | None = None,
        changed: Iterable[DeviceId] = (),
        *,
        link: bool = False,
    ) -> None:
        """Start this state's :meth:`free_on` entries: ``before``'s for the nodes none of the
        ``changed`` devices is on (none when one is on a slice chosen by node labels). ``link``
        (a state with allocations in flight, which ``before`` outlives): what is found for the
        other nodes is written to ``before`` too (and on up), where it is equally true."""
        self._free: dict[str, tuple[Device, ...]] = {}
        self._free_parent: DraState | None = None
        self._touched: set[str] = set()
        if before is None:
            return
        for d in changed:
            node = self._node_of.get(d)
            if node is not None:
                self._touched.add(node)
            elif d in self._selected_ids:
                return  # any node may reach it
        self._free = dict(before._free)
        for node in self._touched:
            self._free.pop(node, None)
        if link:
            self._free_parent = before

    def with_claims(
        self,
        claims: dict[str, ResourceClaim],
        rejected: Iterable[DraObjectError] = (),
        *,
        changed: Collection[str] | None = None,
    ) -> DraState:
        """The same slices, classes and rules with these claims (by ``key``; the dict is kept)
        and rejected objects: what a claim change needs, without sorting pools and indexing
        devices again — equal to ``DraState(self.slices, self.classes, claims.values(),
        rejected, self.rules)``. ``changed``: the keys of every claim that may differ from
        this state's (``None``: any; they are compared)."""
        if self._by_id is None:  # built once here, then shared by every later state
            self._by_id = {d.id: d for s in self._pool_slices for d in s.devices}
        other = self._sharing_devices()
        if self._selected:  # devices chosen by node labels: a node's may change with its labels
            other._by_node = {}
        other.claims = tuple(claims.values())
        other.claim_by_key = claims
        other.rejected = {(e.kind, e.key): e for e in rejected}
        devices = other._count_changes(self, changed)
        if devices is None:
            other._count_claims()
            other._free_cache()
        elif other._by_node is self._by_node:
            other._free_cache(self, devices)
        else:
            other._free_cache()
        return other

    def _count_changes(
        self, before: DraState, keys: Collection[str] | None = None
    ) -> list[DeviceId] | None:
        """What the claims hold, from ``before``'s and the claims that differ (by identity): a
        bind changes one claim of thousands. Returns the devices of the claims that changed;
        ``None`` (count them all) when shares are involved, or when a device was held by two
        claims (then a release frees it or not)."""
        if before.consumed or before._doubled:
            return None
        allocated = set(before.allocated)
        busy = before._busy.copy()
        node_of = self._node_of
        changed: list[DeviceId] = []
        old = before.claim_by_key
        now = self.claim_by_key
        if keys is None:
            gone = [c for k, c in old.items() if now.get(k) is not c]
            came = [c for k, c in now.items() if old.get(k) is not c]
        else:
            gone = [c for k in keys if (c := old.get(k)) is not None and now.get(k) is not c]
            came = [c for k in keys if (c := now.get(k)) is not None and old.get(k) is not c]
        for claims, keep in ((gone, False), (came, True)):
            for c in claims:
                for r in c.allocation.results if c.allocation is not None else ():
                    if r.admin_access:
                        continue
                    device = r.device
                    if r.share_id or (keep and device in allocated):
                        return None  # a share, or a device two claims name
                    changed.append(device)
                    node = node_of.get(device)
                    if keep:
                        allocated.add(device)
                        if node is not None:
                            busy[node] += 1
                    elif device in allocated:
                        allocated.discard(device)
                        if node is not None:
                            busy[node] -= 1
        self.allocated = allocated
        self.consumed = {}
        self.held = self.allocated
        self._busy = busy
        self._doubled = False
        return changed

    def _sharing_devices(self) -> DraState:
        """A new state sharing this one's slices, classes, rules and device indexes; the
        caller sets its claims, ``rejected`` and what the claims hold."""
        other = object.__new__(DraState)
        other.slices, other.classes = self.slices, self.classes
        other.rules, other._rule_of = self.rules, self._rule_of
        other.domain_nodes = self.domain_nodes
        other.class_by_name, other.extended = self.class_by_name, self.extended
        other.problems, other._pool_slices = self.problems, self._pool_slices
        other._unusable = self._unusable
        other._named, other._selected = self._named, self._selected
        other._named_ids, other._selected_ids = self._named_ids, self._selected_ids
        other._by_node, other._by_id = self._by_node, self._by_id
        other._node_of, other._named_size = self._node_of, self._named_size
        other.shareable = self.shareable
        other._doubled = True  # not known: a state built on this one counts its claims
        return other

    @property
    def empty(self) -> bool:
        return not (self.slices or self.classes or self.claims or self.rejected or self.rules)

    def _usable_pools(self) -> list[ResourceSlice]:
        pools: dict[tuple[str, str], list[ResourceSlice]] = {}
        for s in self.slices:
            pools.setdefault((s.driver, s.pool), []).append(s)
        usable: list[ResourceSlice] = []
        for (driver, pool), members in sorted(pools.items()):
            newest = max(s.generation for s in members)
            current = [s for s in members if s.generation == newest]
            want = max(s.slice_count for s in current)
            key = f"{driver}/{pool}"
            if len(current) < want:
                self.problems[key] = (
                    f"pool {key} is incomplete ({len(current)} of {want} slices published)"
                )
                self._unusable.extend((key, s) for s in current)
                continue
            names = Counter(d.id.device for s in current for d in s.devices)
            dup = sorted(n for n, k in names.items() if k > 1)
            if dup:
                self.problems[key] = f"pool {key} lists device {dup[0]} more than once"
                self._unusable.extend((key, s) for s in current)
                continue
            usable.extend(sorted(current, key=lambda s: s.name))
        return usable

    def _tainted(self, slices: list[ResourceSlice]) -> list[ResourceSlice]:
        """``slices`` with each rule's taint added to the devices it matches."""
        if not self.rules:
            return slices
        out = []
        for s in slices:
            devices = []
            for d in s.devices:
                extra = [r for r in self.rules if r.matches(d.id) and r.taint not in d.taints]
                for r in extra:
                    self._rule_of.setdefault((d.id, r.taint), r.name)
                taints = tuple(dict.fromkeys((*d.taints, *(r.taint for r in extra))))
                devices.append(replace(d, taints=taints) if extra else d)
            out.append(replace(s, devices=tuple(devices)) if devices != list(s.devices) else s)
        return out

    def taint_rule(self, device: DeviceId, taint: Taint) -> str | None:
        """The DeviceTaintRule that put ``taint`` on ``device`` (``None``: its slice did)."""
        return self._rule_of.get((device, taint))

    def devices_on(self, node: str, labels: Mapping[str, str]) -> tuple[Device, ...]:
        """Every device of a usable pool reachable from ``node`` (allocated or not), in slice
        order. Remembered per node name (node labels do not change within a cycle)."""
        hit = self._by_node.get(node)
        if hit is None:
            out: list[Device] = []
            for s in (*self._named.get(node, ()), *self._selected):
                if s.selection is not None:
                    if s.selection.reaches(node, labels):
                        out.extend(s.devices)
                else:
                    out.extend(
                        d for d in s.devices if d.selection and d.selection.reaches(node, labels)
                    )
            hit = self._by_node[node] = tuple(out)
        return hit

    def free_on(self, node: str, labels: Mapping[str, str]) -> tuple[Device, ...]:
        """The devices of :meth:`devices_on` no claim holds whole (a device allowing multiple
        allocations may be shared still), in slice order; remembered per node name."""
        hit = self._free.get(node)
        if hit is None:
            allocated = self.allocated
            hit = tuple(d for d in self.devices_on(node, labels) if d.id not in allocated)
            self._free[node] = hit
            up = self
            while up._free_parent is not None and node not in up._touched:
                up = up._free_parent
                up._free.setdefault(node, hit)
        return hit

    def nodes_with_free(self) -> frozenset[str] | None:
        """Nodes a slice naming them gives a device no claim holds whole; ``None`` when some
        usable slice is chosen by node labels (then any node may reach a free device)."""
        if self._selected:
            return None
        size, busy = self._named_size, self._busy
        return frozenset(n for n, k in size.items() if busy.get(n, 0) < k)

    def usable_devices(self) -> Iterator[Device]:
        """Every device of every usable pool, whatever node reaches it."""
        for s in self._pool_slices:
            yield from s.devices

    def problems_on(self, node: str, labels: Mapping[str, str]) -> list[str]:
        """Why pools that would reach ``node`` are not used, and slices naming it (or every
        node) that do not parse are left out (for the pod's explanation)."""
        keys = {
            key
            for key, s in self._unusable
            if (s.selection is not None and s.selection.reaches(node, labels))
            or any(d.selection and d.selection.reaches(node, labels) for d in s.devices)
        }
        out = [self.problems[k] for k in sorted(keys)]
        out.extend(
            f"ResourceSlice {e.key} is ignored: {e.message}"
            for (kind, _), e in sorted(self.rejected.items())
            if kind == "ResourceSlice" and e.node in (node, "*")
        )
        return out

    def rejection(self, kind: str, key: str) -> DraObjectError | None:
        """Why the ``kind`` object ``key`` (a claim's ``namespace/name``) is left out, if it is."""
        return self.rejected.get((kind, key))

    def device(self, device_id: DeviceId) -> Device | None:
        if self._by_id is None:
            self._by_id = {d.id: d for s in self._pool_slices for d in s.devices}
        return self._by_id.get(device_id)

    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        return self.claim_by_key.get(f"{namespace}/{name}")

    def gpu_uuids_allocated(self, node: str, labels: Mapping[str, str]) -> frozenset[str]:
        """``uuid`` attributes of allocated devices on ``node``, whole or shared: the GPUs DRA
        claims hold, which no ``nvidia.com/gpu`` pod may get."""
        return frozenset(
            str(u)
            for d in self.devices_on(node, labels)
            if d.id in self.held and (u := d.attribute("uuid")) is not None
        )

    def used(self, device: DeviceId) -> Mapping[str, Fraction]:
        """What the shares of ``device`` consume together (empty: none)."""
        return self.consumed.get(device, {})

    def shares(self) -> dict[DeviceId, list[tuple[str, DeviceResult]]]:
        """Each shared device's shares: (claim ``namespace/name``, its result)."""
        out: dict[DeviceId, list[tuple[str, DeviceResult]]] = {}
        for c in self.claims:
            for r in c.allocation.results if c.allocation is not None else ():
                if r.share_id and not r.admin_access:
                    out.setdefault(r.device, []).append((c.key, r))
        return out

    def uuids_of(self, allocations: Iterable[ClaimAllocation]) -> tuple[str, ...]:
        """The ``uuid`` attributes of the devices ``allocations`` hold (admin access aside), in
        result order: the GPU (or MIG) UUIDs a pod's claims give it, agent or not."""
        out: list[str] = []
        for a in allocations:
            for r in a.results:
                device = None if r.admin_access else self.device(r.device)
                uuid = device.attribute("uuid") if device is not None else None
                if isinstance(uuid, str) and uuid not in out:
                    out.append(uuid)
        return tuple(out)

    def nodes_holding(self) -> frozenset[str] | None:
        """Nodes with allocated devices in slices naming them; ``None`` when some allocated
        device lives in a slice chosen by node labels (then any node may hold one)."""
        if not self.held:
            return frozenset()
        if not self._selected_ids.isdisjoint(self.held):
            return None
        if not self.consumed:  # held whole only: the per-node counts say
            return frozenset(n for n, k in self._busy.items() if k > 0)
        return frozenset(n for n, ids in self._named_ids.items() if not ids.isdisjoint(self.held))

    def with_allocations(self, allocations: Iterable[ClaimAllocation]) -> DraState:
        """This state with ``allocations`` (written, or being written, by us and not yet seen
        on the watch) counted as allocated: their devices are taken, their claims allocated."""
        allocs = list(allocations)
        if not allocs:
            return self
        other = self._sharing_devices()
        other.rejected = self.rejected
        claims = dict(self.claim_by_key)
        taken = set(self.allocated)
        busy = self._busy.copy()
        changed: list[DeviceId] = []
        consumed = {d: dict(used) for d, used in self.consumed.items()}
        for a in allocs:
            mine = [r for r in a.results if not r.admin_access]
            for r in mine:
                if not r.share_id and r.device not in taken:
                    taken.add(r.device)
                    changed.append(r.device)
                    node = self._node_of.get(r.device)
                    if node is not None:
                        busy[node] += 1
            if not a.reserve_only:  # a reserved claim's shares are counted as its allocation
                _add_shares(consumed, mine)
            claim = claims.get(a.key)
            if claim is not None and not a.extended:
                claims[a.key] = _allocated(claim, a)
        other.claim_by_key = claims
        other.claims = tuple(claims.values())
        other.allocated = taken
        other.consumed = consumed
        other.held = taken | consumed.keys() if consumed else taken
        other._busy = busy
        other._free_cache(self, changed, link=True)
        return other


def _add_shares(
    consumed: dict[DeviceId, dict[str, Fraction]], results: Iterable[DeviceResult]
) -> None:
    for r in results:
        if r.share_id:
            used = consumed.setdefault(r.device, {})
            for name, amount in r.consumed:
                used[name] = used.get(name, Fraction(0)) + amount


#: (claim, allocation in flight) → the claim allocated so: the same pair is counted again on
#: every state until the watch shows the write (by identity; cleared when large)
_ALLOCATED: dict[tuple[int, int], tuple[ResourceClaim, ClaimAllocation, ResourceClaim]] = {}


def _allocated(claim: ResourceClaim, a: ClaimAllocation) -> ResourceClaim:
    hit = _ALLOCATED.get((id(claim), id(a)))
    if hit is not None and hit[0] is claim and hit[1] is a:
        return hit[2]
    if len(_ALLOCATED) > 4096:
        _ALLOCATED.clear()
    out = replace(claim, allocation=_node_allocation(a))
    _ALLOCATED[(id(claim), id(a))] = (claim, a, out)
    return out


def _node_allocation(a: ClaimAllocation) -> Allocation:
    term = NodeSelectorTerm((), (Requirement("metadata.name", "In", (a.node,)),))
    return Allocation(a.results, (term,))
