"""A coordinator whose leadership is taken away, or that cannot even try to lead, on the real
control plane (``wire`` over the API server, as ``topos coordinator`` runs it).

- Another holder writes the Lease (what a replica that waited out a paused leader does): the old
  leader stops scheduling at once — no cycle, so no bind, while it does not lead — and resumes
  when it holds the Lease again.
- The Lease's namespace does not exist: the coordinator is not ready (``/readyz`` 503 naming the
  namespace) and says so in one ERROR line, not a line per retry; once the namespace is created it
  leads, becomes ready and schedules.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from common.kube import LEASES, NAMESPACES, KubeClient
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.leadership import LEADER
from coordinator.app.main import running, wire
from coordinator.app.scheduler import RUNNING
from coordinator.core.framework.results import ScheduleResult
from coordinator.engine.loop import Scheduler
from coordinator.inventory.store import Inventory
from devcluster.pods import gpu_pod
from tests.support.gpu_cluster import RUN_LABEL, GpuCluster
from tests.support.polling import eventually

pytestmark = pytest.mark.kube

LEASE = "topos-coordinator"


def _app(cluster: GpuCluster, namespace: str, lease_namespace: str) -> web.Application:
    config = parse_config(
        {
            "auth": {"enabled": False},
            "scheduler": {"namespace": namespace, "nodeSelector": {RUN_LABEL: cluster.run}},
            "leaderElection": {
                "namespace": lease_namespace,
                "leaseName": LEASE,
                "leaseDurationSeconds": 4,
                "renewDeadlineSeconds": 3,
                "retryPeriodSeconds": 0.5,
            },
        }
    )
    inventory = Inventory(stale_ttl_s=3600)
    cluster.hello(inventory)
    return wire(config, KubeBackend(str(cluster.kubeconfig)), inventory=inventory)


def _record_attempts(scheduler: Scheduler, leading: list[bool], app: web.Application) -> None:
    """Note, for every scheduling attempt, whether this replica led when it began."""
    attempt = scheduler.schedule

    async def noted(entry: Any) -> ScheduleResult:
        leading.append(app[LEADER].is_leader())
        return await attempt(entry)

    scheduler.schedule = noted  # type: ignore[method-assign]


async def _write_holder(kube: KubeClient, namespace: str, holder: str) -> None:
    lease = await kube.get(LEASES, LEASE, namespace=namespace)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    spec = {**lease["spec"], "holderIdentity": holder, "renewTime": now, "acquireTime": now}
    spec["leaseDurationSeconds"] = 3600 if holder else 1
    await kube.update_lease(lease, spec)


def _waits(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """What the scheduling loop said each time it waited to lead."""
    return [
        r
        for r in caplog.records
        if r.name == "coordinator.engine.loop" and r.getMessage().startswith("this replica")
    ]


async def test_a_leader_whose_lease_is_taken_stops_scheduling_until_it_leads_again(
    kube: KubeClient, kubeconfig: Path, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("n1", "dgx-h100")
    app = _app(cluster, namespace, namespace)
    caplog.set_level(logging.INFO, logger="coordinator.engine.loop")
    async with running(app):
        elector = app[LEADER]
        await eventually(elector.is_leader, what="leading")
        await cluster.create(gpu_pod("before", 1, namespace=namespace))
        await cluster.bound("before")
        runtime = app[RUNNING].runtime
        assert runtime is not None
        scheduler = runtime.scheduler
        leading: list[bool] = []
        _record_attempts(scheduler, leading, app)

        # Another replica takes the Lease over: the old leader sees it at its next renewal.
        await _write_holder(kube, namespace, "intruder")
        await eventually(lambda: not elector.is_leader(), what="the old leader stepping down")
        for i in range(3):
            await cluster.create(gpu_pod(f"while-{i}", 1, namespace=namespace))
        await eventually(
            lambda: all(scheduler.queue.named(f"{namespace}/while-{i}") for i in range(3)),
            what="the pods queued on the old leader",
        )
        # Then the Lease is free again: the old leader takes it and places what waited.
        await _write_holder(kube, namespace, "")
        for i in range(3):
            await cluster.bound(f"while-{i}", timeout_s=30)
        assert elector.is_leader()
    assert leading  # the three pods were attempted…
    assert all(leading), f"…but {leading.count(False)} while this replica did not lead"
    assert scheduler.stats.bind_errors == 0  # no bind was refused for want of leadership
    assert scheduler.pauses >= 1
    lost = [r.getMessage() for r in _waits(caplog) if r.levelno == logging.WARNING]
    assert (
        f"this replica lost the lead: another replica leads (intruder holds Lease "
        f"{namespace}/{LEASE}); scheduling stopped until it leads"
    ) in lost, lost


async def test_a_replica_that_starts_while_another_leads_waits_without_saying_it_lost_the_lead(
    kube: KubeClient, kubeconfig: Path, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("n1", "dgx-h100")
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    spec = {"holderIdentity": "other", "leaseDurationSeconds": 3600, "renewTime": now}
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": spec}
    await kube.create(LEASES, {**lease, "metadata": {"name": LEASE}}, namespace=namespace)
    app = _app(cluster, namespace, namespace)
    caplog.set_level(logging.INFO, logger="coordinator.engine.loop")
    async with running(app):
        await cluster.create(gpu_pod("waits", 1, namespace=namespace))
        await eventually(lambda: app[LEADER].observed_leader == "other", what="the Lease read")
        assert not app[LEADER].is_leader()
        assert app[LEADER].why_not_leading() == (
            f"another replica leads (other holds Lease {namespace}/{LEASE})"
        )
        await _write_holder(kube, namespace, "")  # the other replica steps down
        await cluster.bound("waits", timeout_s=30)
    loop = [r.getMessage() for r in caplog.records if r.name == "coordinator.engine.loop"]
    assert "leading" in loop, loop
    # Until it first led, it said it did not lead yet: never that it lost the lead. (Once it
    # leads, a renewal late on a loaded machine may truly lose it.)
    before = [m for m in loop[: loop.index("leading")] if m.startswith("this replica")]
    assert before, "the loop never said why it waited"
    assert all(m.startswith("this replica does not lead yet: ") for m in before), before


async def test_a_lease_namespace_that_does_not_exist_is_not_ready_and_logged_once(
    kube: KubeClient, kubeconfig: Path, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("n1", "dgx-h100")
    missing = f"t-lease-{uuid.uuid4().hex[:8]}"
    app = _app(cluster, namespace, missing)
    attempts = 0
    store = app[LEADER]._store
    create = store.create

    async def counted(record: Any) -> Any:
        nonlocal attempts
        attempts += 1
        return await create(record)

    store.create = counted  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="topos.coordinator.app.election"):
        async with running(app) as url, aiohttp.ClientSession() as http:

            async def readyz() -> tuple[int, dict[str, Any]]:
                async with http.get(f"{url}/readyz") as reply:
                    return reply.status, await reply.json()

            await eventually(lambda: attempts >= 4, what="several tries to create the Lease")
            status, body = await readyz()
            assert status == 503
            assert body["checks"]["leaderElection"] is False
            assert f"namespace '{missing}' does not exist" in body["reasons"]["leaderElection"]
            async with http.get(f"{url}/healthz") as reply:
                assert reply.status == 200  # alive: a restart would not create the namespace
            errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
            assert len(errors) == 1, [r.getMessage() for r in errors]
            assert f"namespace '{missing}' does not exist" in errors[0].getMessage()
            assert not app[LEADER].is_leader()

            await kube.create(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": missing}},
            )
            await eventually(app[LEADER].is_leader, what="leading once the namespace exists")
            status, body = await readyz()
            assert status == 200, body
            await cluster.create(gpu_pod("after", 1, namespace=namespace))
            await cluster.bound("after")
