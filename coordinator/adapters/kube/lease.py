"""The leader election's Lease on the API server: :class:`KubeLeaseStore` (the elector's
``LeaseStore``) and the mapping between a ``coordination.k8s.io/v1`` Lease and a
:class:`LeaseRecord` (times as MicroTime, UTC)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from common.kube import (
    AlreadyExists,
    Conflict,
    Forbidden,
    KubeClient,
    KubeError,
    KubeObject,
    NotFound,
)

__all__ = [
    "KubeLeaseStore",
    "LeaseConflict",
    "LeaseMisconfigured",
    "LeaseRecord",
    "LeaseStore",
    "LeaseUnavailable",
    "lease_from_record",
    "record_from_lease",
]

LEASE_API_VERSION = "coordination.k8s.io/v1"
_MICROTIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


class LeaseConflict(Exception):
    """The Lease changed (or appeared) since it was read: someone else wrote first."""


class LeaseUnavailable(Exception):
    """The Lease could not be read or written (API server down, forbidden, timeout)."""


class LeaseMisconfigured(LeaseUnavailable):
    """The Lease cannot be written until someone changes the cluster or the configuration: its
    namespace does not exist, or RBAC forbids this coordinator the Lease. Retrying alone never
    helps."""


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The election-relevant part of a Lease's ``spec`` plus its ``resourceVersion``."""

    holder: str | None
    lease_duration_s: int
    acquire_time: dt.datetime | None = None
    renew_time: dt.datetime | None = None
    transitions: int = 0
    resource_version: str | None = None

    @property
    def is_free(self) -> bool:
        return not self.holder


class LeaseStore(Protocol):
    """One named Lease. ``update`` is conditional on ``record.resource_version``."""

    async def get(self) -> LeaseRecord | None:
        """The current record, ``None`` if the Lease does not exist. Raises LeaseUnavailable."""
        ...

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        """Create the Lease. Raises LeaseConflict if it already exists."""
        ...

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        """Replace the Lease if its resourceVersion is still ``record.resource_version``."""
        ...


def _format_time(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(dt.UTC).strftime(_MICROTIME_FORMAT)


def _parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    text = value.replace("Z", "+00:00")
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def record_from_lease(obj: Mapping[str, Any]) -> LeaseRecord:
    """A LeaseRecord from a Lease object as the API server returns it (JSON)."""
    spec = obj.get("spec") or {}
    meta = obj.get("metadata") or {}
    duration = spec.get("leaseDurationSeconds")
    transitions = spec.get("leaseTransitions")
    return LeaseRecord(
        holder=spec.get("holderIdentity") or None,
        lease_duration_s=duration if isinstance(duration, int) and duration > 0 else 1,
        acquire_time=_parse_time(spec.get("acquireTime")),
        renew_time=_parse_time(spec.get("renewTime")),
        transitions=transitions if isinstance(transitions, int) and transitions >= 0 else 0,
        resource_version=meta.get("resourceVersion"),
    )


def lease_from_record(record: LeaseRecord, *, name: str, namespace: str) -> dict[str, Any]:
    """The Lease object (JSON) that stores ``record``; conditional when it has a version."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if record.resource_version:
        metadata["resourceVersion"] = record.resource_version
    spec: dict[str, Any] = {
        "holderIdentity": record.holder or "",
        "leaseDurationSeconds": record.lease_duration_s,
        "leaseTransitions": record.transitions,
    }
    if record.acquire_time is not None:
        spec["acquireTime"] = _format_time(record.acquire_time)
    if record.renew_time is not None:
        spec["renewTime"] = _format_time(record.renew_time)
    return {"apiVersion": LEASE_API_VERSION, "kind": "Lease", "metadata": metadata, "spec": spec}


class KubeLeaseStore:
    """The election's Lease through ``common.kube`` (RBAC: leases get/create/update)."""

    def __init__(self, client: KubeClient, *, namespace: str, name: str) -> None:
        self._client = client
        self._namespace = namespace
        self._name = name
        self._where = f"{namespace}/{name}"

    def _object(self, record: LeaseRecord) -> KubeObject:
        return lease_from_record(record, name=self._name, namespace=self._namespace)

    async def get(self) -> LeaseRecord | None:
        try:
            obj = await self._client.get_lease(namespace=self._namespace, name=self._name)
        except Forbidden as exc:
            raise LeaseMisconfigured(f"reading Lease {self._where} is forbidden: {exc}") from exc
        except KubeError as exc:
            raise LeaseUnavailable(str(exc)) from exc
        return None if obj is None else record_from_lease(obj)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        spec = self._object(record)["spec"]
        try:
            obj = await self._client.create_lease(
                namespace=self._namespace, name=self._name, spec=spec
            )
        except AlreadyExists as exc:
            raise LeaseConflict(str(exc)) from exc
        except NotFound as exc:
            raise LeaseMisconfigured(
                f"cannot create Lease {self._where}: namespace {self._namespace!r} does not exist"
            ) from exc
        except Forbidden as exc:
            raise LeaseMisconfigured(f"creating Lease {self._where} is forbidden: {exc}") from exc
        except KubeError as exc:
            raise LeaseUnavailable(str(exc)) from exc
        return record_from_lease(obj)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        if not record.resource_version:
            raise LeaseConflict("an update needs the resourceVersion it was read at")
        obj = self._object(record)
        try:
            updated = await self._client.update_lease(obj, obj["spec"])
        except (Conflict, NotFound) as exc:
            raise LeaseConflict(str(exc)) from exc
        except Forbidden as exc:
            raise LeaseMisconfigured(f"updating Lease {self._where} is forbidden: {exc}") from exc
        except KubeError as exc:
            raise LeaseUnavailable(str(exc)) from exc
        return record_from_lease(updated)
