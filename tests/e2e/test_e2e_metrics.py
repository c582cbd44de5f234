"""``/metrics`` of a whole coordinator on the real control plane, read as the seeds' dashboards
read it: agents stream two 8-GPU nodes, pods are created through the API server, and each scrape
is parsed with ``prometheus_client``'s text parser and checked with the seeds' PromQL — attempts by
result, NeuroNetes' success rate over two scrapes, pending pods going up and down, latency counts
equal to the binds, GPU allocation and per-leaf utilisation from where the pods really went."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from agent.devices import discover_profile
from common.kube import PODS, KubeClient
from common.labels import LEAF
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from devcluster.kube_wait import wait_for_object
from devcluster.nodes import SimNode, register
from devcluster.pods import gpu_pod
from tests.support.polling import eventually
from tests.support.promql import Scrape, rate
from tests.support.sim_agent import SimAgent

pytestmark = pytest.mark.kube


@contextlib.asynccontextmanager
async def _coordinator(kubeconfig: Any, namespace: str, leaf: str) -> AsyncIterator[str]:
    config = parse_config(
        {
            "auth": {"enabled": False},
            "scheduler": {"namespace": namespace, "nodeSelector": {LEAF: leaf}},
        }
    )
    app = wire(config, KubeBackend(str(kubeconfig)))
    async with running(app) as url:
        yield url


async def _bound(kube: KubeClient, namespace: str, name: str) -> str:
    pod = await wait_for_object(
        kube,
        PODS,
        name,
        lambda p: bool(p["spec"].get("nodeName")),
        namespace=namespace,
        what=f"pod {name} to be bound",
    )
    return str(pod["spec"]["nodeName"])


async def test_a_scrape_reads_what_the_scheduler_did(
    kube: KubeClient, kubeconfig: Any, namespace: str, unique_name: Callable[[str], str]
) -> None:
    leaf = unique_name("leaf")
    nodes = []
    for _ in range(2):
        name = unique_name("dgx")
        topology = discover_profile("dgx-a100", hostname=name)
        nodes.append(
            SimNode(name=name, profile="dgx-a100", leaf=leaf, spine="s", topology=topology)
        )
    await register(kube, nodes)
    async with (
        _coordinator(kubeconfig, namespace, leaf) as url,
        aiohttp.ClientSession() as http,
    ):
        agents = [SimAgent(url, n) for n in nodes]
        for agent in agents:
            await agent.start()

        async def scrape() -> Scrape:
            async with http.get(f"{url}/metrics") as resp:
                assert resp.status == 200
                return Scrape.parse(await resp.text(), time.monotonic())

        async def scrape_when(check: Callable[[Scrape], bool], what: str) -> Scrape:
            async def attempt() -> Scrape | None:
                s = await scrape()
                return s if check(s) else None

            return await eventually(attempt, what=what, timeout_s=60)

        s0 = await scrape_when(
            lambda s: s.value("topos_gpus", state="free") == 16, "both nodes' GPUs free"
        )
        placed: dict[str, str] = {}
        for name in ("a", "b", "c"):
            await kube.create(PODS, gpu_pod(name, 4), namespace=namespace)
            placed[name] = await _bound(kube, namespace, name)
        await kube.create(PODS, gpu_pod("big", 8), namespace=namespace)  # 4 GPUs left: too few
        s1 = await scrape_when(
            lambda s: (
                s.value("topos_pending_pods", queue="unschedulable") == 1
                and s.value("topos_schedule_attempts_total", result="scheduled") == 3
            ),
            "three binds and one unschedulable pod",
        )
        assert s1.value("topos_schedule_attempts_total", result="unschedulable") == 1
        assert s1.value("topos_scheduling_attempt_duration_seconds_count", result="scheduled") == 3
        assert s1.value("topos_pod_scheduling_sli_duration_seconds_count") == 3
        success = rate(s0, s1, "neuronetes_scheduler_success_total")
        assert success / rate(s0, s1, "neuronetes_scheduler_attempts_total") == pytest.approx(0.75)
        assert s1.value("neuronetes_scheduler_pending_pods") == 1
        assert s1.value("neuronetes_gpu_utilization_percent") == pytest.approx(75.0)
        assert s1.value("topology_gpu_allocation_ratio") == pytest.approx(0.75)
        assert s1.value("topology_domain_utilization_ratio", tier="leaf", domain=leaf) == 0.75
        per_node = {n.name: sum(4 for v in placed.values() if v == n.name) for n in nodes}
        assert sorted(per_node.values()) == [4, 8]  # packed: one node full, one half used
        assert s1.value(
            "topology_scheduler_domain_fragmentation_ratio", tier="leaf", domain=leaf
        ) == pytest.approx(1.0)  # every free GPU sits on the half-used node

        half = next(n for n, gpus in per_node.items() if gpus == 4)
        lone = next(p for p, node in placed.items() if node == half)
        await kube.delete(PODS, lone, namespace=namespace, grace_period_seconds=0)
        await _bound(kube, namespace, "big")
        s2 = await scrape_when(
            lambda s: s.value("topos_schedule_attempts_total", result="scheduled") == 4,
            "the big pod's bind counted",
        )
        assert s2.value("topos_pending_pods") == 0
        assert s2.value("neuronetes_scheduler_pending_pods") == 0
        assert s2.value("topos_pod_scheduling_sli_duration_seconds_count", attempts="2") == 1
        assert s2.value("topology_placement_decisions_total", result="placed") == 4
        for agent in agents:
            await agent.stop()
