"""Topos as ``default-scheduler`` on a control plane that runs no kube-scheduler (the
conformance run's setting, docs/conformance.md): one profile of that name, and a pod that names no
scheduler — the API server writes ``schedulerName: default-scheduler`` into it — is queued, bound
and announced with kube-scheduler's ``Scheduled`` Event text, which upstream's e2e tests match."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.kube import KubeClient
from coordinator.app.config.scheduling import load_config
from coordinator.core.registry import build_profiles
from devcluster.pods import pod
from tests.support.gpu_cluster import GpuCluster

pytestmark = pytest.mark.kube

DEFAULT_ONLY = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [{"schedulerName": "default-scheduler"}],
}


async def test_a_pod_naming_no_scheduler_is_placed_by_a_default_scheduler_profile(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    node = await cluster.add_node("only", "dgx-h100")
    profiles = build_profiles(load_config(DEFAULT_ONLY))
    assert profiles.names[0] == "default-scheduler"
    async with cluster.coordinator(profiles=profiles) as runtime:
        created = await cluster.create(pod("plain", namespace=namespace, scheduler=None))
        assert created["spec"]["schedulerName"] == "default-scheduler"  # the API server's default
        await cluster.create(pod("for-topos", namespace=namespace, scheduler="topos"))
        assert (await cluster.bound("plain"))["spec"]["nodeName"] == node
        attempt = runtime.scheduler.last_attempt(f"{namespace}/plain")
        assert attempt is not None
        assert attempt.profile == "default-scheduler"
        event = await cluster.event("Scheduled", name="plain")
        assert f"Successfully assigned {namespace}/plain to {node}" in event["message"]
        # "topos" is no profile here: that pod is someone else's, never queued, never bound.
        assert runtime.scheduler.queue.named(f"{namespace}/for-topos") is None
        assert not (await cluster.pod("for-topos"))["spec"].get("nodeName")
