"""Leader election on the real API server's Leases.

Stepped tests drive each candidate's attempts by hand on a fake monotonic clock, so "the follower
takes over within the lease duration" is checked exactly: refused just before the duration has
passed since it last saw the lease change, granted just after. The loop tests run the real
``run()`` tasks with short durations and check the order of events (no timing assertions).
"""

from __future__ import annotations

import asyncio
import datetime as dt

from common.kube import LEASES, KubeClient
from coordinator.adapters.kube.lease import KubeLeaseStore, LeaseRecord
from coordinator.app.election import LeaderElectionSettings, LeaderElector
from tests.support.polling import eventually

LEASE = "topos-coordinator"


class SteppedClock:
    """Monotonic time moved by the test; the wall clock is real (it only stamps the Lease)."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def _candidate(
    kube: KubeClient, namespace: str, identity: str, clock: SteppedClock
) -> LeaderElector:
    settings = LeaderElectionSettings(
        identity=identity,
        namespace=namespace,
        lease_name=LEASE,
        lease_duration_s=15,
        renew_deadline_s=10,
        retry_period_s=2,
    )
    return LeaderElector(
        KubeLeaseStore(kube, namespace=namespace, name=LEASE), settings, clock=clock
    )


async def _holder(kube: KubeClient, namespace: str) -> dict[str, object]:
    lease = await kube.get(LEASES, LEASE, namespace=namespace)
    spec: dict[str, object] = lease["spec"]
    return spec


async def test_one_leader_crash_takeover_within_the_lease_duration(
    kube: KubeClient, namespace: str
) -> None:
    clock = SteppedClock()
    a = _candidate(kube, namespace, "coordinator-a", clock)
    b = _candidate(kube, namespace, "coordinator-b", clock)

    assert await a.try_acquire_or_renew()  # creates the Lease
    assert not await b.try_acquire_or_renew()
    spec = await _holder(kube, namespace)
    assert spec["holderIdentity"] == "coordinator-a"
    assert spec["leaseDurationSeconds"] == 15

    # A renews while alive; B keeps following, however long that lasts.
    for _ in range(5):
        clock.now += 10
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()

    # A crashes: no release, no more renewals. B saw the last change at `crash`.
    crash = clock.now
    clock.now = crash + 14.9
    assert not await b.try_acquire_or_renew()
    assert (await _holder(kube, namespace))["holderIdentity"] == "coordinator-a"
    clock.now = crash + 15.1
    assert await b.try_acquire_or_renew()
    spec = await _holder(kube, namespace)
    assert spec["holderIdentity"] == "coordinator-b"
    assert spec["leaseTransitions"] == 1

    # A comes back (same identity, e.g. a restarted container): it must follow now.
    assert not await a.try_acquire_or_renew()
    assert a.observed_leader == "coordinator-b"


async def test_graceful_release_hands_over_without_waiting(
    kube: KubeClient, namespace: str
) -> None:
    clock = SteppedClock()
    a = _candidate(kube, namespace, "coordinator-a", clock)
    b = _candidate(kube, namespace, "coordinator-b", clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert await a.release()
    spec = await _holder(kube, namespace)
    assert spec["holderIdentity"] in ("", None)
    # no time passes at all: B takes it on its very next attempt
    assert await b.try_acquire_or_renew()
    assert (await _holder(kube, namespace))["holderIdentity"] == "coordinator-b"
    assert not await a.release()  # not ours any more: nothing changes
    assert (await _holder(kube, namespace))["holderIdentity"] == "coordinator-b"


async def test_racing_for_a_free_lease_exactly_one_wins(kube: KubeClient, namespace: str) -> None:
    clock = SteppedClock()
    candidates = [_candidate(kube, namespace, f"coordinator-{i}", clock) for i in range(4)]
    # racing to create it
    results = await asyncio.gather(*(c.try_acquire_or_renew() for c in candidates))
    assert results.count(True) == 1
    winner = candidates[results.index(True)]
    assert await winner.release()
    # racing for the released one (compare-and-swap on resourceVersion)
    results = await asyncio.gather(*(c.try_acquire_or_renew() for c in candidates))
    assert results.count(True) == 1
    holder = (await _holder(kube, namespace))["holderIdentity"]
    assert holder == candidates[results.index(True)].identity


class CountingStore(KubeLeaseStore):
    def __init__(self, kube: KubeClient, namespace: str) -> None:
        super().__init__(kube, namespace=namespace, name=LEASE)
        self.reads = 0

    async def get(self) -> LeaseRecord | None:
        self.reads += 1
        return await super().get()


async def test_running_electors_crash_and_graceful_handover(
    kube: KubeClient, namespace: str
) -> None:
    events: list[str] = []

    def elector(identity: str, *, release: bool) -> tuple[LeaderElector, CountingStore]:
        settings = LeaderElectionSettings(
            identity=identity,
            namespace=namespace,
            lease_name=LEASE,
            # short, yet a renewal on a loaded two-core machine stays well within the deadline
            lease_duration_s=4.0,
            renew_deadline_s=3.0,
            retry_period_s=0.25,
            release_on_stop=release,
        )

        async def started() -> None:
            events.append(f"{identity} started")

        async def stopped() -> None:
            events.append(f"{identity} stopped")

        store = CountingStore(kube, namespace)
        return (
            LeaderElector(store, settings, on_started_leading=started, on_stopped_leading=stopped),
            store,
        )

    a, _ = elector("a", release=False)
    b, b_store = elector("b", release=True)
    task_a = asyncio.create_task(a.run())
    await asyncio.wait_for(a.wait_until_leading(), 60)
    task_b = asyncio.create_task(b.run())
    await eventually(lambda: b_store.reads >= 3, what="B to read the lease 3 times")
    assert a.is_leader()
    assert not b.is_leader()

    # crash A: its task dies without releasing the lease
    task_a.cancel()
    await asyncio.gather(task_a, return_exceptions=True)
    assert not a.is_leader()
    await asyncio.wait_for(b.wait_until_leading(), 60)
    assert b.is_leader()
    assert (await _holder(kube, namespace))["holderIdentity"] == "b"

    # stop B gracefully: it releases, and a fresh candidate gets the lease on its first read
    c, c_store = elector("c", release=True)
    task_b.cancel()
    await asyncio.gather(task_b, return_exceptions=True)
    assert not b.is_leader()
    task_c = asyncio.create_task(c.run())
    await asyncio.wait_for(c.wait_until_leading(), 60)
    assert c_store.reads == 1
    task_c.cancel()
    await asyncio.gather(task_c, return_exceptions=True)
    assert events == [
        "a started",
        "a stopped",
        "b started",
        "b stopped",
        "c started",
        "c stopped",
    ]
    assert (await _holder(kube, namespace))["holderIdentity"] in ("", None)
