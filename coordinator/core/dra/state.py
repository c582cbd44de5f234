"""The DRA objects one scheduling cycle sees: :class:`DraState`.

BOUNDARY STUB (issue 13): the adapters build a ``DraState`` from the watched objects, parsed with
the ``parse_*`` functions below; the core's DynamicResources plugin allocates from it. The
dra-core work replaces the bodies; the names and signatures are the contract.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.core.dra.model import ClaimAllocation

__all__ = [
    "DeviceClass",
    "DraObjectError",
    "DraState",
    "ResourceClaim",
    "ResourceSlice",
    "parse_device_class",
    "parse_resource_claim",
    "parse_resource_slice",
]


@dataclass(frozen=True, slots=True)
class DraObjectError:
    """Why a watched DRA object cannot be used (it harms nothing else)."""

    kind: str
    key: str
    message: str


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    raw: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    raw: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str
    resource_version: str
    raw: Mapping[str, Any]


def parse_resource_slice(obj: Mapping[str, Any]) -> ResourceSlice | DraObjectError:
    raise NotImplementedError


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass | DraObjectError:
    raise NotImplementedError


def parse_resource_claim(obj: Mapping[str, Any]) -> ResourceClaim | DraObjectError:
    raise NotImplementedError


class DraState:
    """Every ResourceSlice, DeviceClass and ResourceClaim as of one cycle (immutable)."""

    def __init__(
        self,
        slices: Iterable[ResourceSlice] = (),
        classes: Iterable[DeviceClass] = (),
        claims: Iterable[ResourceClaim] = (),
    ) -> None:
        self.slices = tuple(slices)
        self.classes = tuple(classes)
        self.claims = tuple(claims)

    def with_allocations(self, allocations: Iterable[ClaimAllocation]) -> DraState:
        """This state with ``allocations`` (written, or being written, by us and not yet seen
        on the watch) counted as allocated: their devices are taken, their claims allocated."""
        raise NotImplementedError
