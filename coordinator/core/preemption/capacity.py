"""Part of a shareable DRA GPU (consumable capacity, KEP-5075), as the victim search frees it.

A preemptor whose ResourceClaim asks part of a GPU (``capacity.requests`` on devices that allow
multiple allocations) fits a node when, once the victims' claims are freed, one such device
there has the capacity left for each of its requests, by the allocator's rules
(:func:`coordinator.core.dra.capacity.share`). Freeing some shares of a device is enough: it need
not be freed whole.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from fractions import Fraction

from coordinator.core.dra.allocator import selects
from coordinator.core.dra.capacity import share
from coordinator.core.dra.demand import GpuDemand
from coordinator.core.dra.model import DeviceId
from coordinator.core.dra.objects import Device, SubRequest
from coordinator.core.dra.state import DraState
from coordinator.core.dra.values import SelectorError
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.snapshot import Snapshot

__all__ = ["CapacityAsk", "CapacityRoom", "capacity_room"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityAsk:
    """One request of a preemptor's claim asking part of a shareable GPU."""

    member: str  # the pod, "namespace/name"
    asked: Mapping[str, Fraction]  # capacity.requests
    devices: Mapping[str, tuple[Device, ...]]  # node → the shareable GPUs it may take there


class CapacityRoom:
    """Where the preemptor's capacity asks fit once a set of claims is freed."""

    def __init__(self, asks: Sequence[CapacityAsk], dra: DraState) -> None:
        self.asks: dict[str, list[CapacityAsk]] = {}
        for ask in asks:
            self.asks.setdefault(ask.member, []).append(ask)
        self._shares = dra.shares()

    def asks_for(self, member: str) -> bool:
        return member in self.asks

    def _used(self, device: DeviceId, freed: AbstractSet[str]) -> dict[str, Fraction]:
        used: dict[str, Fraction] = {}
        for claim, result in self._shares.get(device, ()):
            if claim in freed:
                continue
            for name, amount in result.consumed:
                used[name] = used.get(name, Fraction(0)) + amount
        return used

    def fits(self, member: str, node: str, freed: AbstractSet[str]) -> bool:
        """Whether each capacity ask of ``member`` fits some device of ``node`` once the claims
        ``freed`` release their shares."""
        for ask in self.asks.get(member, ()):
            if not any(
                isinstance(share(d.consumable, ask.asked, self._used(d.id, freed)), dict)
                for d in ask.devices.get(node, ())
            ):
                return False
        return True


def _shareable(dra: DraState, alt: SubRequest, device: Device) -> bool:
    cls = dra.class_by_name.get(alt.class_name)
    if cls is None or not device.allow_multiple:
        return False
    try:
        return selects(device, cls.selectors) and selects(device, alt.selectors)
    except SelectorError:
        return False


def capacity_room(snapshot: Snapshot, pods: Collection[PodRequest]) -> CapacityRoom | None:
    """The capacity asks of ``pods``' unallocated claims on ``snapshot``'s nodes (``None``:
    none ask part of a shareable GPU)."""
    dra = snapshot.dra
    if dra.empty or not any(p.claims for p in pods):
        return None
    uuids = {g.uuid for n in snapshot.nodes if n.topology for g in n.topology.gpus}
    demand = GpuDemand(dra, uuids)
    asks: list[CapacityAsk] = []
    for pod in pods:
        for entry in pod.claims:
            claim = dra.claim(pod.namespace, entry.resolved_name)
            if claim is None or claim.allocation is not None:
                continue
            for request in claim.requests:
                alt = next((a for a in request.alternatives if demand.shares_gpu(a)), None)
                if alt is None:
                    continue
                devices = {
                    n.name: found
                    for n in snapshot.nodes
                    if (
                        found := tuple(
                            d
                            for d in dra.devices_on(n.name, n.labels)
                            if d.attribute("uuid") in uuids and _shareable(dra, alt, d)
                        )
                    )
                }
                asks.append(CapacityAsk(member=pod.key, asked=dict(alt.capacity), devices=devices))
    return CapacityRoom(asks, dra) if asks else None
