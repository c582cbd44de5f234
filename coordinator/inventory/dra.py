"""The Dynamic Resource Allocation objects the coordinator watches: :class:`DraStore`.

ResourceSlices, DeviceClasses and DeviceTaintRules (cluster-scoped) and ResourceClaims (in the
namespaces the coordinator serves) arrive here as the API server returns them — from the reflectors
of :mod:`coordinator.adapters.kube.dra`, or from the in-memory cluster — and are parsed once, on
arrival, with :mod:`coordinator.core.dra.state`'s ``parse_*`` functions. An object that cannot be
parsed (a malformed selector, duplicate device names, ...) is left out, logged once per version and
counted in :attr:`DraStore.rejected` (and, while it stays bad, in :meth:`DraStore.rejected_now`,
the ``topos_dra_rejected_objects`` metric); the explanation of a pod naming it says why; it harms
no other object. :meth:`DraStore.state` builds the immutable
:class:`~coordinator.core.dra.state.DraState` a scheduling cycle sees only when something changed
since the last one, and most clusters have no DRA objects at all: then it is one shared empty
state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from coordinator.core.dra.computedomains import ComputeDomain, parse_compute_domain
from coordinator.core.dra.state import (
    DeviceClass,
    DeviceTaintRule,
    DraObjectError,
    DraState,
    ResourceClaim,
    ResourceSlice,
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_claim,
    parse_resource_slice,
)

log = logging.getLogger(__name__)

__all__ = ["EMPTY", "DraChange", "DraKind", "DraStore", "claim_allocated", "object_key"]

DraKind = Literal[
    "ResourceSlice", "DeviceClass", "ResourceClaim", "DeviceTaintRule", "ComputeDomain"
]
Parsed = ResourceSlice | DeviceClass | ResourceClaim | DeviceTaintRule | ComputeDomain
#: The state of a cluster without DRA objects (shared: DraState is immutable).
EMPTY: Final = DraState()


@dataclass(frozen=True, slots=True)
class DraChange:
    """One object added, changed or removed (``obj`` ``None``)."""

    kind: DraKind
    key: str
    obj: Mapping[str, Any] | None
    before: Mapping[str, Any] | None = field(default=None, compare=False)  # as last seen

    @property
    def frees(self) -> bool:
        """Could this change let a pod refused for want of devices fit? A slice or class added
        or changed, a claim deallocated or deleted (not a claim created or allocated), a
        DeviceTaintRule changed or deleted (not one created)."""
        if self.kind == "DeviceTaintRule":
            return self.before is not None
        if self.kind != "ResourceClaim":
            return True
        return claim_allocated(self.before) and not claim_allocated(self.obj)


def object_key(kind: DraKind, obj: Mapping[str, Any]) -> str:
    """``name`` for the cluster-scoped kinds, ``namespace/name`` for claims and
    ComputeDomains."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    if kind in ("ResourceClaim", "ComputeDomain"):
        return f"{meta.get('namespace') or 'default'}/{name}"
    return name


def claim_allocated(obj: Mapping[str, Any] | None) -> bool:
    """Does this ResourceClaim object carry ``status.allocation``?"""
    return bool(obj is not None and (obj.get("status") or {}).get("allocation"))


def _parse(kind: DraKind, obj: Mapping[str, Any]) -> Parsed | DraObjectError:
    if kind == "ResourceSlice":
        return parse_resource_slice(obj)
    if kind == "DeviceClass":
        return parse_device_class(obj)
    if kind == "DeviceTaintRule":
        return parse_device_taint_rule(obj)
    if kind == "ComputeDomain":
        return parse_compute_domain(obj)
    return parse_resource_claim(obj)


class DraStore:
    """Event-loop only. ``parse`` is replaceable for tests (default: the core's parsers)."""

    def __init__(
        self, *, parse: Callable[[DraKind, Mapping[str, Any]], Parsed | DraObjectError] = _parse
    ) -> None:
        self._parse = parse
        self._raw: dict[DraKind, dict[str, Mapping[str, Any]]] = {
            "ResourceSlice": {},
            "DeviceClass": {},
            "ResourceClaim": {},
            "DeviceTaintRule": {},
            "ComputeDomain": {},
        }
        self._parsed: dict[DraKind, dict[str, Parsed]] = {k: {} for k in self._raw}
        #: the parsed claims by key, and the keys changed since the last state was built
        self._claims: dict[str, ResourceClaim] = {}
        self._claims_changed: set[str] = set()
        #: Objects left out, by (kind, key): why (what explain and logs show).
        self.errors: dict[tuple[DraKind, str], DraObjectError] = {}
        #: How many object versions were rejected since start (a metric).
        self.rejected = 0
        #: Bumped on every change; a state built at one version is reused until the next.
        self.version = 0
        self._state: DraState = EMPTY
        self._state_version = 0
        #: Bumped on a change to anything but a ResourceClaim: while it stays, a new state
        #: reuses the last one's pools and device indexes (claims change on every bind).
        self._devices_version = 0
        self._state_devices_version = -1
        self._listeners: list[Callable[[DraChange], None]] = []

    def subscribe(self, listener: Callable[[DraChange], None]) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    # --- changes -------------------------------------------------------------------------------

    def replace(self, kind: DraKind, items: list[Mapping[str, Any]]) -> None:
        """The complete list of ``kind`` (first sync and every re-list)."""
        fresh = {object_key(kind, obj): obj for obj in items}
        for key in tuple(self._raw[kind]):
            if key not in fresh:
                self.apply(kind, key, None)
        for key, obj in fresh.items():
            self.apply(kind, key, obj)

    def apply(self, kind: DraKind, key: str, obj: Mapping[str, Any] | None) -> None:
        """One object of ``kind`` added or changed, or removed (``None``)."""
        raw = self._raw[kind]
        before = raw.get(key)
        if obj is None:
            if raw.pop(key, None) is None:
                return
            self._parsed[kind].pop(key, None)
            self.errors.pop((kind, key), None)
            if kind == "ResourceClaim":
                self._claims.pop(key, None)
                self._claims_changed.add(key)
        else:
            if raw.get(key) == obj:
                return
            raw[key] = obj
            self._store(kind, key, obj)
        self.version += 1
        if kind != "ResourceClaim":
            self._devices_version += 1
        change = DraChange(kind, key, obj, before)
        for listener in tuple(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("DRA change listener failed for %s %s", kind, key)

    def _store(self, kind: DraKind, key: str, obj: Mapping[str, Any]) -> None:
        try:
            parsed = self._parse(kind, obj)
        except Exception as exc:  # a parser bug must not take the watch down
            log.exception("parsing %s %s failed", kind, key)
            parsed = DraObjectError(kind, key, f"{type(exc).__name__}: {exc}")
        if kind == "ResourceClaim":
            self._claims_changed.add(key)
            if isinstance(parsed, ResourceClaim):
                self._claims[key] = parsed
            else:
                self._claims.pop(key, None)
        if isinstance(parsed, DraObjectError):
            self._parsed[kind].pop(key, None)
            if self.errors.get((kind, key)) != parsed:
                log.warning("%s %s is ignored: %s", kind, key, parsed.message)
            self.errors[(kind, key)] = parsed
            self.rejected += 1
            return
        self.errors.pop((kind, key), None)
        self._parsed[kind][key] = parsed

    # --- reading -------------------------------------------------------------------------------

    @property
    def empty(self) -> bool:
        """No DRA object at all (usable or not)?"""
        return not any(self._raw.values())

    def raw(self, kind: DraKind, key: str) -> Mapping[str, Any] | None:
        """The object of ``kind`` under ``key`` as last seen (parsed or not)."""
        return self._raw[kind].get(key)

    def objects(self, kind: DraKind) -> Mapping[str, Mapping[str, Any]]:
        """Every object of ``kind`` as last seen (parsed or not), by key; read-only."""
        return self._raw[kind]

    def count(self, kind: DraKind) -> int:
        return len(self._raw[kind])

    def rejected_now(self) -> dict[str, int]:
        """Objects left out now, by kind (every kind listed), and pools that are not used
        (``ResourcePool``: duplicate device names, slices missing): the metric's values."""
        out: dict[str, int] = dict.fromkeys(self._raw, 0)
        for kind, _ in self.errors:
            out[kind] += 1
        out["ResourcePool"] = len(self.state().problems)
        return out

    def state(self) -> DraState:
        """Every usable object as one immutable state, rebuilt only after a change."""
        if self._state_version != self.version:
            slices = self._parsed["ResourceSlice"].values()
            classes = self._parsed["DeviceClass"].values()
            claims = self._parsed["ResourceClaim"].values()
            rules = self._parsed["DeviceTaintRule"].values()
            domains = self._parsed["ComputeDomain"].values()
            if (
                self._state_devices_version == self._devices_version
                and self._state is not EMPTY
                and (slices or classes or rules)
            ):
                # the store's keys are the claims' (namespace/name); only these changed
                self._state = self._state.with_claims(
                    dict(self._claims), self.errors.values(), changed=self._claims_changed
                )
            elif slices or classes or claims or rules or self.errors:
                self._state = DraState(
                    slices=[o for o in slices if isinstance(o, ResourceSlice)],
                    classes=[o for o in classes if isinstance(o, DeviceClass)],
                    claims=[o for o in claims if isinstance(o, ResourceClaim)],
                    rejected=self.errors.values(),
                    rules=[o for o in rules if isinstance(o, DeviceTaintRule)],
                    domains=[o for o in domains if isinstance(o, ComputeDomain)],
                )
            else:
                self._state = EMPTY
            self._state_version = self.version
            self._state_devices_version = self._devices_version
            self._claims_changed = set()
        return self._state
