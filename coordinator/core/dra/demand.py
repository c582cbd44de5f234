"""How many GPUs pods' ResourceClaims still ask for, and which of a node's GPUs its DRA devices
stand for: what gang planning counts for pods whose GPUs come from claims rather than
``nvidia.com/gpu``.

A device is a GPU when it joins (by its ``uuid`` attribute) a GPU some agent reported. A request
alternative asks for GPUs when its DeviceClass's and its own selectors select at least one such
device. A claim's GPU demand is, per request, the ``ExactCount`` of its cheapest alternative (a
``firstAvailable`` request may settle for it; the per-pod allocation decides), alternatives that
select no GPU counting 0, and so do alternatives asking part of a shareable GPU (``capacity``
requests on devices that allow multiple allocations: a share, not a GPU). Claims already
allocated ask for nothing more (their GPUs are held already); a claim several pods share counts
for the first of them only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from coordinator.core.dra.allocator import selects
from coordinator.core.dra.objects import Device, ResourceClaim, SubRequest
from coordinator.core.dra.state import DraState
from coordinator.core.dra.values import SelectorError
from coordinator.core.podspec.parse import PodRequest

__all__ = ["GpuDemand", "node_dra_gpus"]


class GpuDemand:
    """GPU demand of claims against one :class:`DraState` and the GPUs agents reported."""

    def __init__(self, state: DraState, gpu_uuids: Collection[str]) -> None:
        self.state = state
        self.gpu_uuids = gpu_uuids
        self._gpus: list[Device] | None = None
        self._memo: dict[tuple[str, tuple[str, ...]], bool] = {}

    def _gpu_devices(self) -> list[Device]:
        if self._gpus is None:
            self._gpus = [
                d for d in self.state.usable_devices() if d.attribute("uuid") in self.gpu_uuids
            ]
        return self._gpus

    def asks_gpus(self, alt: SubRequest) -> bool:
        """Whether the alternative's class and selectors select some GPU."""
        key = (alt.class_name, alt.selectors)
        hit = self._memo.get(key)
        if hit is None:
            cls = self.state.class_by_name.get(alt.class_name)
            hit = False
            if cls is not None:
                try:
                    hit = any(
                        selects(d, cls.selectors) and selects(d, alt.selectors)
                        for d in self._gpu_devices()
                    )
                except SelectorError:
                    hit = False  # its own attempt reports the error (allocate); here: no GPU
            self._memo[key] = hit
        return hit

    def shares_gpu(self, alt: SubRequest) -> bool:
        """Whether the alternative asks part of a GPU: capacity requests, and every GPU its
        class selects allows multiple allocations."""
        if not alt.capacity:
            return False
        cls = self.state.class_by_name.get(alt.class_name)
        if cls is None:
            return False
        try:
            chosen = [d for d in self._gpu_devices() if selects(d, cls.selectors)]
        except SelectorError:
            return False
        return bool(chosen) and all(d.allow_multiple for d in chosen)

    def claim(self, claim: ResourceClaim) -> int:
        """The GPUs an unallocated claim asks for (0 once allocated)."""
        if claim.allocation is not None:
            return 0
        total = 0
        for request in claim.requests:
            counts = [
                alt.count
                if alt.mode == "ExactCount" and self.asks_gpus(alt) and not self.shares_gpu(alt)
                else 0
                for alt in request.alternatives
                if not alt.admin_access
            ]
            total += min(counts, default=0)
        return total

    def pods(self, pods: Sequence[PodRequest]) -> dict[str, int]:
        """Pod key → the GPUs its ``spec.resourceClaims`` still ask for (pods asking none are
        left out). A claim shared by several of ``pods`` counts for the first only."""
        seen: set[str] = set()
        out: dict[str, int] = {}
        for pod in pods:
            gpus = 0
            for entry in pod.claims:
                claim = self.state.claim(pod.namespace, entry.resolved_name)
                if claim is None or claim.key in seen:
                    continue
                seen.add(claim.key)
                gpus += self.claim(claim)
            if gpus:
                out[pod.key] = gpus
        return out


def node_dra_gpus(
    state: DraState, node: str, labels: Mapping[str, str], gpu_uuids: Collection[str]
) -> frozenset[str]:
    """UUIDs of the node's GPUs (``gpu_uuids``) that a DRA device reachable from it stands for."""
    if state.empty:
        return frozenset()
    return frozenset(
        u
        for d in state.devices_on(node, labels)
        if isinstance(u := d.attribute("uuid"), str) and u in gpu_uuids
    )
