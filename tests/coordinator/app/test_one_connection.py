"""A coordinator with every part that talks to the API server on (inventory sync, scheduler and
its Events, authentication, leader election, the AgentPool controller, config reloads) opens one
connection to it, for its whole life: the kubeconfig is read once and one connection pool serves
them all, whatever they write. And what it writes on its own Pod (the leader label the Service
selects, the Warning Event of a refused config) arrives there."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from common.kube import PODS, KubeClient
from common.kube.core import KubeClientCore
from coordinator.app.config.load import load_file
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.leadership import LEADER, LEADER_LABEL
from coordinator.app.main import running, wire
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.gpu_cluster import RUN_LABEL, GpuCluster
from tests.support.polling import eventually

pytestmark = pytest.mark.kube


async def test_one_coordinator_opens_one_connection_and_writes_on_its_own_pod(
    kube: KubeClient, kubeconfig: Path, namespace: str, tmp_path: Path, monkeypatch: Any
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("only", "dgx-h100")
    await cluster.create(pod("topos-coordinator", scheduler="nobody", namespace=None))
    monkeypatch.setenv("POD_NAME", "topos-coordinator")
    monkeypatch.setenv("POD_NAMESPACE", namespace)
    opened: list[object] = []
    connect = KubeClientCore.connect.__func__  # type: ignore[attr-defined]

    async def counted(cls: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(args[0] if args else kwargs.get("kubeconfig"))
        return await connect(cls, *args, **kwargs)

    monkeypatch.setattr(KubeClientCore, "connect", classmethod(counted))
    path = tmp_path / "config.yaml"
    scheduler = (
        f"scheduler: {{namespace: {namespace}, nodeSelector: {{{RUN_LABEL}: {cluster.run}}}}}"
    )
    path.write_text(f"{scheduler}\ncoordinator: {{reloadIntervalSeconds: 0.1}}\n")
    inventory = Inventory(stale_ttl_s=3600)
    cluster.hello(inventory)
    app = wire(
        load_file(str(path)),
        KubeBackend(str(kubeconfig)),
        inventory=inventory,
        config_path=str(path),
    )

    async def label() -> str | None:
        got = await kube.get(PODS, "topos-coordinator", namespace=namespace)
        value = (got["metadata"].get("labels") or {}).get(LEADER_LABEL)
        return None if value is None else str(value)

    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(running(app))
        assert app[LEADER].settings.enabled  # on by default wherever the scheduler binds
        await eventually(lambda: app[LEADER].is_leader(), what="leading")
        assert await eventually(label, what="the leader label") == "true"

        path.write_text(f"{scheduler}\nscheduling: {{scoringWeights: {{nope: 1}}}}\n")
        warning = await cluster.event("ConfigRefused", name="topos-coordinator")
        assert warning["type"] == "Warning"
        assert "nope" in warning["message"]
    # Stopped: the Lease released and the label gone, so the Service selects no stale leader.
    assert await label() is None
    assert opened == [str(kubeconfig)]
