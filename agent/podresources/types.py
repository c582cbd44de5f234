"""What the kubelet reports through PodResources, as frozen values."""

from __future__ import annotations

import msgspec


class DeviceAllocation(msgspec.Struct, frozen=True, kw_only=True):
    resource_name: str  # "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
    device_ids: tuple[str, ...]  # GPU UUIDs / MIG device ids as the device plugin named them
    numa_nodes: tuple[int, ...] = ()


class MemoryAllocation(msgspec.Struct, frozen=True, kw_only=True):
    memory_type: str  # "memory", "hugepages-1Gi"
    size_bytes: int
    numa_nodes: tuple[int, ...] = ()


class ContainerAllocation(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    pod: str
    container: str
    devices: tuple[DeviceAllocation, ...] = ()
    cpu_ids: tuple[int, ...] = ()  # exclusive CPUs (CPU Manager static policy); empty if shared
    memory: tuple[MemoryAllocation, ...] = ()

    def device_ids(self, resource_prefix: str = "nvidia.com/") -> tuple[str, ...]:
        """All device ids of resources starting with ``resource_prefix``."""
        return tuple(
            i
            for d in self.devices
            if d.resource_name.startswith(resource_prefix)
            for i in d.device_ids
        )


class Allocatable(msgspec.Struct, frozen=True, kw_only=True):
    devices: tuple[DeviceAllocation, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[MemoryAllocation, ...] = ()
