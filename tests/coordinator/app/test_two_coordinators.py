"""Two coordinators started as the README starts one (``wire`` over the real API server, no
``leaderElection`` section, authentication off): they elect a leader on a Lease by default, only
the leader binds, and when it stops the other takes over at once (the Lease is released).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from aiohttp import web

from common.kube import LEASES, KubeClient
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.leadership import LEADER
from coordinator.app.main import running, wire
from coordinator.app.scheduler import RUNNING
from coordinator.inventory.store import Inventory
from devcluster.pods import gpu_pod
from tests.support.gpu_cluster import RUN_LABEL, GpuCluster
from tests.support.polling import eventually


def _attempts(app: web.Application) -> int:
    runtime = app[RUNNING].runtime
    return runtime.scheduler.stats.attempts if runtime is not None else 0


async def test_two_coordinators_with_the_default_config_only_the_leader_binds(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("lead", "dgx-h100")
    config = parse_config(
        {
            "auth": {"enabled": False},
            # the shared control plane: only this test's pods, onto this test's node
            "scheduler": {"namespace": namespace, "nodeSelector": {RUN_LABEL: cluster.run}},
        }
    )
    assert config.leader_election is None  # the README's config names no election
    apps = []
    for _ in range(2):
        inventory = Inventory(stale_ttl_s=3600)
        cluster.hello(inventory)
        apps.append(wire(config, KubeBackend(str(kubeconfig)), inventory=inventory))
    stacks = [contextlib.AsyncExitStack() for _ in apps]
    try:
        for stack, app in zip(stacks, apps, strict=True):
            await stack.enter_async_context(running(app))
        leader = await eventually(
            lambda: next((a for a in apps if a[LEADER].is_leader()), None), what="a leader"
        )
        follower = apps[1 - apps.index(leader)]
        for i in range(4):
            await cluster.create(gpu_pod(f"train-{i}", 1, namespace=namespace))
        for i in range(4):
            await cluster.bound(f"train-{i}")
        assert not follower[LEADER].is_leader()
        assert _attempts(follower) == 0  # it never scheduled, so it never bound
        for i in range(4):
            # Events are written in the background after the bind: wait for each, then count
            await cluster.event("Scheduled", name=f"train-{i}")
            assert len(await cluster.events(f"train-{i}", "Scheduled")) == 1
        assert await cluster.events(reason="FailedScheduling") == []
        lease = await kube.get(LEASES, leader[LEADER].settings.lease_name, namespace="default")
        assert lease["spec"]["holderIdentity"] == leader[LEADER].identity

        # the leader stops (a rollout): it releases the Lease and the other binds at once
        await stacks[apps.index(leader)].aclose()
        await cluster.create(gpu_pod("after", 1, namespace=namespace))
        await cluster.bound("after", timeout_s=30)
        assert follower[LEADER].is_leader()
        assert _attempts(follower) >= 1
    finally:
        for stack in stacks:
            await stack.aclose()
