"""Leader election on a ``coordination.k8s.io/v1`` Lease (docs/design.md §6: only the leader binds).

Two or more coordinators run; each is a candidate. The one whose identity is the Lease's
``holderIdentity`` leads and renews ``renewTime`` every ``retry_period_s``; the others poll. The
semantics follow client-go's ``leaderelection`` package, which every Kubernetes controller uses:

* A candidate never trusts another machine's clock. It records *when it last saw the record
  change* (its own monotonic clock) and treats the lease as expired only when
  ``lease_duration_s`` has passed on *its* clock without a change. A crashed leader is therefore
  replaced within ``lease_duration_s + retry_period_s`` of its last renewal.
* Every write is a compare-and-swap on ``metadata.resourceVersion``: two candidates racing for an
  expired lease cannot both win; the loser sees a conflict and keeps following.
* A leader that fails to renew for ``renew_deadline_s`` (API server unreachable, conflicts) steps
  down on its own — before its lease can expire for the others — so two leaders never bind at once.
* A graceful stop *releases* the lease (empty holder, one-second duration) so a follower takes over
  on its next poll instead of waiting out the lease.

The Lease is reached through :class:`LeaseStore` (on the API server:
:class:`~coordinator.adapters.kube.lease.KubeLeaseStore`). Time comes from an injected
:class:`ElectionClock` so tests can step the election deterministically against the real API
server.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Final, Protocol

import msgspec

from common.labels import check_namespace_name, check_object_name
from coordinator.adapters.kube.lease import (
    LeaseConflict,
    LeaseMisconfigured,
    LeaseRecord,
    LeaseStore,
    LeaseUnavailable,
)

_log = logging.getLogger("topos.coordinator.app.election")


class ElectionClock(Protocol):
    """Time as the elector sees it: a monotonic reading, the wall clock, and sleeping."""

    def monotonic(self) -> float: ...

    def wall(self) -> dt.datetime: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clocks."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def default_identity() -> str:
    """``<pod name>_<random>``: unique per process even when a pod restarts in place."""
    host = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{host}_{uuid.uuid4().hex[:8]}"


def default_namespace() -> str:
    """The coordinator's own namespace (``POD_NAMESPACE``, which the Deployment sets from the
    downward API); outside a pod ``default``, which every API server has."""
    return os.environ.get("POD_NAMESPACE") or "default"


DEFAULT_LEASE_NAME: Final = "topos-coordinator"


class LeaderElectionSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the coordinators elect their leader (the config file's ``leaderElection`` section)."""

    enabled: bool = True
    """Off: this process always leads, whatever else runs (one replica only)."""
    lease_name: str = msgspec.field(default=DEFAULT_LEASE_NAME, name="leaseName")
    """Name of the Lease object: coordinators that share it elect one leader."""
    namespace: str = msgspec.field(default_factory=default_namespace)
    """Namespace of the Lease (default: the coordinator's own)."""
    identity: str | None = None
    """This candidate's name in ``holderIdentity``; must differ between replicas. None: the pod's
    name and a random suffix, chosen once when the elector is made (so a reloaded file that leaves
    it out reads as unchanged)."""
    lease_duration_s: float = msgspec.field(default=15.0, name="leaseDurationSeconds")
    """How long followers wait, after the last change they saw, before taking over."""
    renew_deadline_s: float = msgspec.field(default=10.0, name="renewDeadlineSeconds")
    """How long a leader keeps trying to renew before it steps down."""
    retry_period_s: float = msgspec.field(default=2.0, name="retryPeriodSeconds")
    """Pause between attempts to acquire or renew."""
    release_on_stop: bool = msgspec.field(default=True, name="releaseOnStop")
    """Release the Lease on a graceful stop so a follower takes over at once."""

    def __post_init__(self) -> None:
        if self.identity is not None and not self.identity:
            raise ValueError("identity: must not be empty (leave it out for the pod's name)")
        check_object_name("leaseName", self.lease_name)
        check_namespace_name("namespace", self.namespace)
        if self.retry_period_s <= 0:
            raise ValueError("retryPeriodSeconds must be positive")
        if self.renew_deadline_s <= self.retry_period_s * _JITTER:
            raise ValueError(
                f"renewDeadlineSeconds ({self.renew_deadline_s}) must exceed "
                f"{_JITTER} x retryPeriodSeconds ({self.retry_period_s})"
            )
        if self.lease_duration_s <= self.renew_deadline_s:
            raise ValueError(
                f"leaseDurationSeconds ({self.lease_duration_s}) must exceed "
                f"renewDeadlineSeconds ({self.renew_deadline_s})"
            )


_JITTER = 1.2
_NOT_READ_YET: Final = "the Lease has not been read yet"
Callback = Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


class LeaderElector:
    """One candidate. ``run()`` campaigns until cancelled; ``is_leader()`` gates binding and
    ``wait_until_leading()`` resumes what only the leader runs."""

    def __init__(
        self,
        store: LeaseStore,
        settings: LeaderElectionSettings,
        *,
        on_started_leading: Callback = _nothing,
        on_stopped_leading: Callback = _nothing,
        on_trouble: Callable[[str | None], None] = lambda trouble: None,
        clock: ElectionClock | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._identity = settings.identity or default_identity()
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_trouble = on_trouble
        self._clock: ElectionClock = clock if clock is not None else SystemClock()
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._last_renew: float | None = None
        self._leading = False
        self._changed = asyncio.Event()  # replaced (after being set) on every change
        self._trouble: str | None = _NOT_READ_YET

    @property
    def identity(self) -> str:
        """``holderIdentity`` when this candidate leads (the settings' or one made up once)."""
        return self._identity

    @property
    def settings(self) -> LeaderElectionSettings:
        return self._settings

    @property
    def observed(self) -> LeaseRecord | None:
        """The Lease record as last read or written by this candidate."""
        return self._observed

    @property
    def observed_leader(self) -> str | None:
        return self._observed.holder if self._observed else None

    @property
    def trouble(self) -> str | None:
        """Why this candidate cannot even try to lead (the Lease's namespace does not exist,
        RBAC forbids the Lease), or ``None``."""
        return self._trouble

    def is_leader(self) -> bool:
        """True while this candidate holds a lease it renewed within the renew deadline.

        The binder asks this before every bind, the scheduling loop before every cycle: a leader
        cut off from the API server (or paused) stops after ``renew_deadline_s``, before
        followers may take over at ``lease_duration_s``.
        """
        if not self._settings.enabled:
            return True
        if not self._leading or self._last_renew is None:
            return False
        return self._clock.monotonic() - self._last_renew <= self._settings.renew_deadline_s

    async def wait_until_leading(self) -> None:
        """Return once ``is_leader()`` holds (at once if it does)."""
        while not self.is_leader():
            await self._changed.wait()

    def why_not_leading(self) -> str:
        """Who holds the Lease as this candidate last saw it, or why it cannot tell."""
        s = self._settings
        lease = f"Lease {s.namespace}/{s.lease_name}"
        if self.is_leader():
            return f"it holds {lease}"
        if self._trouble is _NOT_READ_YET:
            return f"it has not read {lease} yet"
        if self._trouble is not None:
            return f"{lease} cannot be used: {self._trouble}"
        holder = self._observed.holder if self._observed else None
        if holder == self._identity:
            return (
                f"it did not renew {lease} within renewDeadlineSeconds ({s.renew_deadline_s:g} s)"
            )
        if holder:
            return f"another replica leads ({holder} holds {lease})"
        return f"no replica holds {lease} yet"

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _set_trouble(self, trouble: str | None) -> None:
        if trouble == self._trouble:
            return
        s = self._settings
        if trouble is not None:
            _log.error(
                "leader election on Lease %s/%s cannot proceed, so this coordinator will never "
                "lead (and is not ready) until it is fixed: %s",
                s.namespace,
                s.lease_name,
                trouble,
            )
        elif self._trouble is not _NOT_READ_YET:
            _log.info("lease %s/%s can be written again", s.namespace, s.lease_name)
        self._trouble = trouble
        self._on_trouble(trouble)

    async def try_acquire_or_renew(self) -> bool:
        """One attempt: take the lease if it is free, expired or ours; True if we hold it now."""
        try:
            held = await self._try_acquire_or_renew()
        except LeaseMisconfigured as exc:
            self._set_trouble(str(exc))
            return False
        except LeaseUnavailable as exc:
            s = self._settings
            _log.warning("lease %s/%s unavailable: %s", s.namespace, s.lease_name, exc)
            return False
        self._set_trouble(None)
        return held

    async def _try_acquire_or_renew(self) -> bool:
        s = self._settings
        now = self._clock.monotonic()
        wall = self._clock.wall()
        current = await self._store.get()
        duration = max(1, round(s.lease_duration_s))
        if current is None:
            mine = LeaseRecord(
                holder=self._identity,
                lease_duration_s=duration,
                acquire_time=wall,
                renew_time=wall,
                transitions=0,
            )
            try:
                created = await self._store.create(mine)
            except LeaseConflict as exc:
                _log.info("lease %s/%s: create lost: %s", s.namespace, s.lease_name, exc)
                return False
            self._observe(created, now)
            return True

        if self._observed is None or current.resource_version != self._observed.resource_version:
            self._observe(current, now)
        ours = current.holder == self._identity
        if not ours and not current.is_free:
            expires = self._observed_at + current.lease_duration_s
            if now < expires:
                return False
        new = replace(
            current,
            holder=self._identity,
            lease_duration_s=duration,
            acquire_time=current.acquire_time if ours else wall,
            renew_time=wall,
            transitions=current.transitions if ours else current.transitions + 1,
        )
        try:
            updated = await self._store.update(new)
        except LeaseConflict as exc:
            _log.info("lease %s/%s: update lost: %s", s.namespace, s.lease_name, exc)
            return False
        self._observe(updated, now)
        return True

    def _observe(self, record: LeaseRecord, now: float) -> None:
        previous = self._observed.holder if self._observed else None
        self._observed = record
        self._observed_at = now
        if record.holder != previous and record.holder:
            _log.info(
                "lease %s/%s: leader is now %s",
                self._settings.namespace,
                self._settings.lease_name,
                record.holder,
            )

    async def release(self) -> bool:
        """Give the lease up if we hold it, so followers need not wait for it to expire."""
        self._step_down()
        try:
            current = await self._store.get()
        except LeaseUnavailable:
            return False
        if current is None or current.holder != self._identity:
            return False
        wall = self._clock.wall()
        released = replace(
            current, holder=None, lease_duration_s=1, renew_time=wall, acquire_time=wall
        )
        try:
            self._observe(await self._store.update(released), self._clock.monotonic())
        except (LeaseConflict, LeaseUnavailable) as exc:
            _log.warning("lease release failed: %s", exc)
            return False
        _log.info("released lease %s/%s", self._settings.namespace, self._settings.lease_name)
        return True

    async def run(self) -> None:
        """Campaign forever: acquire, lead while renewals succeed, step down, campaign again.

        Cancelling the task stops leading (calling ``on_stopped_leading``) and, with
        ``release_on_stop``, releases the lease.
        """
        s = self._settings
        if not s.enabled:
            self._become_leader()
            await self._on_started()
            try:
                await asyncio.Event().wait()
            finally:
                self._step_down()
                await self._on_stopped()
            return
        try:
            while True:
                while not await self._attempt(within=s.retry_period_s * 4):
                    await self._clock.sleep(s.retry_period_s * random.uniform(1.0, _JITTER))
                self._become_leader()
                await self._on_started()
                await self._renew_until_lost()
                self._step_down()
                _log.warning("lost leadership of %s/%s", s.namespace, s.lease_name)
                await self._on_stopped()
        finally:
            if self._leading:
                self._step_down()
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._stop_leading())

    async def _stop_leading(self) -> None:
        try:
            if self._settings.release_on_stop:
                await self.release()
        finally:
            await self._on_stopped()

    def _become_leader(self) -> None:
        self._leading = True
        self._last_renew = self._clock.monotonic()
        self._notify()
        _log.info(
            "%s is leading %s/%s",
            self._identity,
            self._settings.namespace,
            self._settings.lease_name,
        )

    def _step_down(self) -> None:
        self._leading = False
        self._notify()

    async def _attempt(self, *, within: float) -> bool:
        try:
            async with asyncio.timeout(within):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            return False

    async def _renew_until_lost(self) -> None:
        s = self._settings
        while True:
            await self._clock.sleep(s.retry_period_s)
            assert self._last_renew is not None
            deadline = self._last_renew + s.renew_deadline_s
            while True:
                left = deadline - self._clock.monotonic()
                if left <= 0:
                    return
                if await self._attempt(within=left):
                    if self._observed is None or self._observed.holder != self._identity:
                        return
                    self._last_renew = self._clock.monotonic()
                    break
                if self._observed is not None and self._observed.holder not in (
                    None,
                    self._identity,
                ):
                    return  # someone else holds it now: we lost it
                await self._clock.sleep(s.retry_period_s)
