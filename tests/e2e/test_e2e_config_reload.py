"""Editing the coordinator's configuration file on a running coordinator (the whole app over the
real API server): the next pod is placed under the new scoring weights, and a broken edit is
refused with a Warning Event on the coordinator's Pod while the previous weights keep placing.

Two 8-GPU NVSwitch nodes, one per leaf: ``busy`` already runs a 4-GPU pod, ``cheap`` is the node
the pods prefer by node affinity (what a cost label would say). Seed 003's weights pack GPUs
(``busy`` wins); NeuroNetes' ``costEfficiency`` factor weighted up makes the preference win.
A KubeNexus profile's ``schedulerName`` is the name the coordinator then schedules."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from common.kube import KubeClient
from coordinator.api.keys import METRICS
from coordinator.app.config.load import load_file
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from coordinator.inventory.store import Inventory
from devcluster.pods import gpu_pod, pod
from tests.support.gpu_cluster import RUN_LABEL, GpuCluster
from tests.support.polling import eventually

pytestmark = pytest.mark.kube

SEED_003 = """
  scoringWeights:
    resourceAvailability: 0.4
    topologyAlignment: 0.3
    domainUtilization: 0.2
    historicalPerformance: 0.1
"""
COST_FIRST = """
  scoringWeights:
    resourceAvailability: 0.1
    costEfficiency: 0.9
"""
BROKEN = """
  scoringWeights:
    costEfficency: 1
"""


def config_text(namespace: str, run: str, scheduling: str) -> str:
    return (
        "auth: {enabled: false}\n"
        "leaderElection: {enabled: false}\n"
        "coordinator: {reloadIntervalSeconds: 0.2}\n"
        f"scheduler: {{namespace: {namespace}, nodeSelector: {{{RUN_LABEL}: '{run}'}}}}\n"
        f"scheduling:{scheduling}"
    )


def preferring(name: str, node: str) -> dict[str, Any]:
    """A 1-GPU pod preferring ``node`` (preferred node affinity, weight 100)."""
    return gpu_pod(name, 1, affinity=_prefer(node))


def _prefer(node: str) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                        ]
                    },
                }
            ]
        }
    }


async def test_an_edited_config_places_the_next_pod_and_a_broken_edit_keeps_the_old(
    kube: KubeClient, kubeconfig: Path, namespace: str, tmp_path: Path, monkeypatch: Any
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    busy = await cluster.add_node("busy", "dgx-h100", labels_extra={"topos.io/leaf": "leaf-1"})
    cheap = await cluster.add_node("cheap", "dgx-h100", labels_extra={"topos.io/leaf": "leaf-2"})
    # The coordinator's own Pod (the downward API names it): a refused config is an Event on it.
    await cluster.create(pod("topos-coordinator", scheduler="nobody", namespace=None))
    monkeypatch.setenv("POD_NAME", "topos-coordinator")
    monkeypatch.setenv("POD_NAMESPACE", namespace)
    path = tmp_path / "config.yaml"
    path.write_text(config_text(namespace, cluster.run, SEED_003))
    inventory = Inventory(stale_ttl_s=3600)
    cluster.hello(inventory)
    app = wire(
        load_file(str(path)),
        KubeBackend(str(kubeconfig)),
        inventory=inventory,
        config_path=str(path),
    )
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(running(app))
        await cluster.create(gpu_pod("filler", 4, node_selector={"kubernetes.io/hostname": busy}))
        assert (await cluster.bound("filler"))["spec"]["nodeName"] == busy

        await cluster.create(preferring("packed", cheap))
        assert (await cluster.bound("packed"))["spec"]["nodeName"] == busy  # seed 003: pack

        path.write_text(config_text(namespace, cluster.run, COST_FIRST))
        await eventually(lambda: reloads(app, "applied") == 1, what="the edit applied")
        await cluster.create(preferring("cost-first", cheap))
        assert (await cluster.bound("cost-first"))["spec"]["nodeName"] == cheap

        path.write_text(config_text(namespace, cluster.run, BROKEN))
        warning = await cluster.event("ConfigRefused", name="topos-coordinator")
        assert warning["type"] == "Warning"
        assert "scoringWeights.costEfficency" in warning["message"]
        assert reloads(app, "refused") == 1
        await cluster.create(preferring("still-cost-first", cheap))
        assert (await cluster.bound("still-cost-first"))["spec"]["nodeName"] == cheap


def reloads(app: web.Application, result: str) -> float:
    sample = app[METRICS].registry.get_sample_value(
        "topos_config_reloads_total", {"result": result}
    )
    return sample or 0.0


KUBENEXUS = """
  apiVersion: kubescheduler.config.k8s.io/v1
  kind: KubeSchedulerConfiguration
  profiles:
    - schedulerName: kubenexus-scheduler
      plugins:
        queueSort: {enabled: [{name: Coscheduling}]}
        score: {enabled: [{name: NUMATopology, weight: 10}]}
"""


async def test_a_kubenexus_profile_names_the_scheduler_its_pods_ask_for(
    kube: KubeClient, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    node = await cluster.add_node("nexus", "dgx-h100")
    path = tmp_path / "config.yaml"
    path.write_text(config_text(namespace, cluster.run, KUBENEXUS))
    inventory = Inventory(stale_ttl_s=3600)
    cluster.hello(inventory)
    app = wire(load_file(str(path)), KubeBackend(str(kubeconfig)), inventory=inventory)
    async with running(app):
        await cluster.create(gpu_pod("nexus-job", 1, scheduler="kubenexus-scheduler"))
        assert (await cluster.bound("nexus-job"))["spec"]["nodeName"] == node
        await cluster.create(gpu_pod("topos-job", 1))  # not this profile's name: left alone
        await cluster.create(gpu_pod("nexus-after", 1, scheduler="kubenexus-scheduler"))
        await cluster.bound("nexus-after")
        assert not (await cluster.pod("topos-job"))["spec"].get("nodeName")
