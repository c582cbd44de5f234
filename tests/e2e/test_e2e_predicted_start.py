"""A predicted start on the real control plane, through the coordinator as ``topos coordinator``
wires it, from each source of a running pod's expected end:

- a pod waiting behind a running pod that declares ``topos.io/expected-duration: 30s`` shows when
  it is expected to start — in ``GET /v1/pending`` and as the suffix of its ``PodScheduled``
  message, naming the pod it waits for — and starts then: the test plays the kubelet, ending the
  running pod when its declared 30 seconds are up, and the waiting pod's real bind is compared
  with the forecast;
- a Job's ``activeDeadlineSeconds``: the Job controller creates the Job's pod, Topos binds it, and
  a pod waiting behind it is expected to start when that Job reaches its deadline — the Job's
  ``status.startTime`` plus ``activeDeadlineSeconds``, the source named ``deadline``;
- a pod refused for its volume (an Immediate claim no PV is bound to: its provisioner never
  answers) has an unknown start, with the reason — the forecast's copy of the cluster holds the
  claims — never "expected to start now"."""

from __future__ import annotations

import asyncio
import datetime
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession

from common.kube import PODS, KubeClient
from coordinator.adapters.kube.volumes import PERSISTENT_VOLUME_CLAIMS, STORAGE_CLASSES
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from coordinator.forecast.runtimes import EXPECTED_DURATION
from coordinator.inventory.store import Inventory
from devcluster.pods import gpu_pod, pod
from tests.support.gang_cluster import JOBS
from tests.support.gpu_cluster import RUN_LABEL, GpuCluster
from tests.support.polling import eventually
from tests.support.volumes import claim, storage_class

pytestmark = pytest.mark.kube

#: Long enough for the forecast, made once train-8 has waited a poll (5–10 s after it failed).
RUNS_S = 30.0
#: A waiting pod's first forecast: two polls of 5 s, the worker's spawn and the forward run.
FORECAST_WITHIN_S = 25.0
#: Between the forecast and the real start: the pod is bound once its room is seen free.
TOLERANCE_S = 5.0
DEADLINE_S = 600
#: The Job's startTime is written to the second.
DEADLINE_TOLERANCE_S = 3.0


@asynccontextmanager
async def forecasting(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> AsyncIterator[tuple[GpuCluster, Inventory, str, ClientSession]]:
    """One DGX A100 node and a coordinator serving it: the cluster, the coordinator's inventory,
    its URL and an HTTP session."""
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
        yield cluster, inventory, url, http


async def expected_start(http: ClientSession, url: str, name: str) -> dict[str, Any]:
    """The pending pod ``name``'s forecast in ``GET /v1/pending``, once it has one."""

    async def forecast() -> dict[str, Any] | None:
        async with http.get(f"{url}/v1/pending") as resp:
            doc = await resp.json()
        line = next((p for p in doc["pods"] if p["name"] == name), None)
        start = (line or {}).get("expected_start")
        return start if start and start.get("at") else None

    result: dict[str, Any] = await eventually(
        forecast, what=f"{name}'s forecast", timeout_s=FORECAST_WITHIN_S
    )
    return result


def condition_message(pod: dict[str, Any]) -> str:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return str(c.get("message") or "")
    return ""


async def test_a_waiting_pod_shows_its_predicted_start_and_starts_then(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    async with forecasting(kube, kubeconfig, namespace) as (cluster, inventory, url, http):
        blocker = gpu_pod("train-7", 8)
        blocker["metadata"]["annotations"] = {EXPECTED_DURATION: f"{RUNS_S:.0f}s"}
        await cluster.create(blocker)
        node = (await cluster.bound("train-7"))["spec"]["nodeName"]
        # A forecast is made from the inventory: train-8 comes once the watch has told it
        # train-7 holds the node (else its first forecast is "now", kept for a minute).
        await eventually(
            lambda: any(p.name == "train-7" for p in inventory.bound_pods(node)),
            what="train-7 in the inventory",
        )
        started = time.time()
        await cluster.create(gpu_pod("train-8", 8))
        await cluster.unschedulable("train-8")

        start = await expected_start(http, url, "train-8")
        assert start["waits_for"] == {f"{namespace}/train-7": "annotation"}
        assert start["node"] == f"gpu-{cluster.run}"
        assert re.fullmatch(r"expected to start in ~\d+ s, when train-7 ends", start["message"])
        predicted = float(start["at"])
        assert abs(predicted - (started + RUNS_S)) < TOLERANCE_S  # its 30 s from its bind

        async def stated() -> str | None:
            message = condition_message(await cluster.pod("train-8"))
            return message if "expected to start" in message else None

        message = await eventually(stated, what="the forecast on train-8's condition")
        assert re.fullmatch(
            r"0/1 nodes are available: 1 Insufficient nvidia\.com/gpu\.; expected to start in "
            r"~\d+ s \(about \d\d:\d\d UTC\), when train-7 ends",
            message,
        ), message

        # The kubelet's part: train-7's work takes the 30 seconds it declared.
        await asyncio.sleep(max(0.0, started + RUNS_S - time.time()))
        await kube.patch(
            PODS,
            "train-7",
            {"status": {"phase": "Succeeded"}},
            namespace=namespace,
            subresource="status",
        )
        await cluster.bound("train-8")
        actual = time.time()
        assert abs(actual - predicted) < TOLERANCE_S, (actual, predicted)


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
    async with forecasting(kube, kubeconfig, namespace) as (cluster, inventory, url, http):
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

        start = await expected_start(http, url, "next")
        assert start["waits_for"] == {f"{namespace}/{name}": "deadline"}
        assert re.fullmatch(rf"expected to start in ~\d+ min, when {name} ends", start["message"])
        assert abs(float(start["at"]) - ends) < DEADLINE_TOLERANCE_S, (start["at"], ends)


async def test_a_pod_refused_for_its_volume_is_not_expected_to_start_now(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    async with forecasting(kube, kubeconfig, namespace) as (cluster, _, url, http):
        cls = f"remote-{cluster.run}"
        await kube.create(
            STORAGE_CLASSES, storage_class(cls, mode="Immediate", provisioner="example.com/none")
        )
        await kube.create(
            PERSISTENT_VOLUME_CLAIMS,
            claim("data", cls=cls, namespace=namespace),
            namespace=namespace,
        )
        volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
        await cluster.create(pod("reader", namespace=namespace, spec={"volumes": volumes}))
        await cluster.unschedulable("reader")

        async def forecast() -> dict[str, Any] | None:
            async with http.get(f"{url}/v1/pending") as resp:
                doc = await resp.json()
            line = next((p for p in doc["pods"] if p["name"] == "reader"), None)
            start = (line or {}).get("expected_start")
            return start if start else None

        start = await eventually(forecast, what="reader's forecast", timeout_s=FORECAST_WITHIN_S)
        assert start["message"] == "start unknown: pod has unbound immediate PersistentVolumeClaims"
        assert start["unknown"] == "pod has unbound immediate PersistentVolumeClaims"
        assert "in_s" not in start

        async def stated() -> str | None:
            message = condition_message(await cluster.pod("reader"))
            return message if "start unknown" in message else None

        message = await eventually(stated, what="the forecast on reader's condition")
        assert message.startswith(
            "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims."
        ), message
        # the reason is the refusal's, stated once
        assert message.endswith("PersistentVolumeClaims.; start unknown"), message
