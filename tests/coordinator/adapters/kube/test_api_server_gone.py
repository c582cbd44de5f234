"""A coordinator whose API server goes away (leader election off, so nothing steps it down):
its failed binds back off instead of spinning, and it binds what waited once the server returns.
On the real control plane, the coordinator's connections cut by ``tests.support.severable``."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from common.kube import KubeClient
from coordinator.engine.outage import MAX_WAIT_S
from devcluster.pods import gpu_pod
from tests.support.gpu_cluster import GpuCluster
from tests.support.polling import eventually
from tests.support.severable import severable

pytestmark = pytest.mark.kube

PODS = 40


async def test_binds_back_off_while_the_api_server_is_gone_and_resume_when_it_returns(
    kube: KubeClient,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator.engine.loop")
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("n1", "dgx-h100")
    go = asyncio.Event()  # the pods queue up before the first cycle
    async with (
        severable(kubeconfig) as link,
        cluster.coordinator(
            kubeconfig=link.kubeconfig(kubeconfig, tmp_path / "kubeconfig"), gate=go
        ) as runtime,
    ):
        scheduler = runtime.scheduler
        for i in range(PODS):
            await cluster.create(gpu_pod(f"p-{i}", 0, namespace=namespace))
        await eventually(
            lambda: all(scheduler.queue.named(f"{namespace}/p-{i}") for i in range(PODS)),
            what="every pod queued",
        )
        await link.sever()
        go.set()
        # 1 + 2 + 4 + 8 s of pauses, each ended by a probe that fails again
        await eventually(
            lambda: scheduler.outage.wait_s == MAX_WAIT_S,
            what="the loop's pause grown to its cap",
            timeout_s=60,
        )
        # Each pod backing off on its own (1 s doubling) would have been tried four or five
        # times by now (160 attempts or more; measured before the pause: 160 in the first 10 s).
        # With it: each pod about once, plus what a pause's probe lets through (20 measured).
        assert scheduler.stats.attempts < 2 * PODS, scheduler.stats.attempts
        assert scheduler.stats.bound == 0
        said = [r.getMessage() for r in caplog.records if "does not answer" in r.getMessage()]
        assert 4 <= len(said) <= 6, said  # once per pause, not once per failed bind
        await link.restore()
        for i in range(PODS):
            await cluster.bound(f"p-{i}", timeout_s=60)
        assert not scheduler.outage.ongoing
        assert any("answers again" in r.getMessage() for r in caplog.records)
