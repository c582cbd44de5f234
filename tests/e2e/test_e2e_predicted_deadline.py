"""A Job's ``activeDeadlineSeconds`` as a running pod's expected end, on the real control plane:
the Job controller creates the Job's pod, Topos binds it, and a pod waiting behind it shows in
``GET /v1/pending`` that it is expected to start when that pod's Job reaches its deadline —
the Job's ``status.startTime`` plus ``activeDeadlineSeconds``, the source named ``deadline``."""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession

from common.kube import PODS, KubeClient
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from coordinator.inventory.store import Inventory
from devcluster.pods import gpu_pod
from tests.support.gang_cluster import JOBS
from tests.support.gpu_cluster import RUN_LABEL, GpuCluster
from tests.support.polling import eventually

pytestmark = pytest.mark.kube

DEADLINE_S = 600
#: The Job's startTime is written to the second.
TOLERANCE_S = 3.0


def job(name: str, deadline_s: int) -> dict[str, Any]:
    template = gpu_pod("worker", 8)
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "activeDeadlineSeconds": deadline_s,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"app": name}}, "spec": template["spec"]},
        },
    }


def unix(stamp: str) -> float:
    return (
        datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")
        .replace(tzinfo=datetime.UTC)
        .timestamp()
    )


async def test_a_pod_waiting_behind_a_job_with_a_deadline_expects_it_then(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("gpu", "dgx-a100")
    inventory = Inventory(stale_ttl_s=3600)
    cluster.hello(inventory)
    config = parse_config(
        {
            "auth": {"enabled": False},
            "scheduler": {"namespace": namespace, "nodeSelector": {RUN_LABEL: cluster.run}},
        }
    )
    app = wire(config, KubeBackend(str(kubeconfig)), inventory=inventory)
    async with running(app) as url, ClientSession() as http:
        await kube.create(JOBS, job("sweep", DEADLINE_S), namespace=namespace)

        async def worker() -> str | None:
            pods = (await kube.list(PODS, namespace=namespace, label_selector="app=sweep"))["items"]
            return str(pods[0]["metadata"]["name"]) if pods else None

        name = await eventually(worker, what="the Job's pod")
        node = (await cluster.bound(name))["spec"]["nodeName"]
        await eventually(
            lambda: any(p.name == name for p in inventory.bound_pods(node)),
            what="the Job's pod in the inventory",
        )

        async def started() -> str | None:
            status = (await kube.get(JOBS, "sweep", namespace=namespace)).get("status") or {}
            return status.get("startTime")

        ends = unix(await eventually(started, what="the Job's startTime")) + DEADLINE_S
        await cluster.create(gpu_pod("next", 8))
        await cluster.unschedulable("next")

        async def forecast() -> dict[str, Any] | None:
            async with http.get(f"{url}/v1/pending") as resp:
                doc = await resp.json()
            line = next((p for p in doc["pods"] if p["name"] == "next"), None)
            start = (line or {}).get("expected_start")
            return start if start and start.get("at") else None

        start = await eventually(forecast, what="next's forecast", timeout_s=15)
        assert start["waits_for"] == {f"{namespace}/{name}": "deadline"}
        assert re.fullmatch(rf"expected to start in ~\d+ min, when {name} ends", start["message"])
        assert abs(float(start["at"]) - ends) < TOLERANCE_S, (start["at"], ends)
