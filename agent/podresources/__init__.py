"""Kubelet PodResources v1 client: which devices and CPUs each container actually holds."""

from agent.podresources.client import DEFAULT_SOCKET, PodResourcesClient, PodResourcesError
from agent.podresources.types import (
    Allocatable,
    ContainerAllocation,
    DeviceAllocation,
    MemoryAllocation,
)

__all__ = [
    "DEFAULT_SOCKET",
    "Allocatable",
    "ContainerAllocation",
    "DeviceAllocation",
    "MemoryAllocation",
    "PodResourcesClient",
    "PodResourcesError",
]
