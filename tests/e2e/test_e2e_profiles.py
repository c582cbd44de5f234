"""Several profiles in one coordinator, on the real control plane (kube-scheduler's
``profiles:``): each pod is scheduled by the profile its ``spec.schedulerName`` names, the
profiles sharing one queue and one view of the cluster; a pod naming no configured profile is
left alone (docs/scheduling.md#profiles)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from common.kube import KubeClient
from coordinator.app.config.scheduling import load_config
from coordinator.core.registry import build_profiles
from devcluster.pods import pod
from tests.support.gpu_cluster import GpuCluster

pytestmark = pytest.mark.kube

#: Two profiles: ``topos`` as shipped, ``topos-nopref`` without NodeAffinity's score.
SCHEDULING = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {"schedulerName": "topos"},
        {
            "schedulerName": "topos-nopref",
            "plugins": {"score": {"disabled": [{"name": "NodeAffinity"}]}},
        },
    ],
}


def preferring(name: str, node: str, scheduler: str, namespace: str) -> dict[str, Any]:
    """A CPU pod that prefers ``node`` (preferred node affinity, weight 100)."""
    term = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]
    }
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]
        }
    }
    return pod(name, namespace=namespace, scheduler=scheduler, affinity=affinity)


async def test_each_pod_is_placed_by_the_profile_it_names(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    # "a-…" sorts first: where the scores tie, the pod goes there.
    first = await cluster.add_node("a-first", "dgx-h100")
    second = await cluster.add_node("b-second", "dgx-h100")
    profiles = build_profiles(load_config(SCHEDULING))
    assert profiles.names == ("topos", "topos-nopref", "topos-agentpools")
    await cluster.create(preferring("by-other", second, "someone-else", namespace))
    async with cluster.coordinator(profiles=profiles) as runtime:
        # topos: NodeAffinity's score takes the pod to the node it prefers.
        await cluster.create(preferring("by-topos", second, "topos", namespace))
        assert (await cluster.bound("by-topos"))["spec"]["nodeName"] == second
        # topos-nopref: the same preference counts for nothing; the emptier node wins.
        await cluster.create(preferring("by-nopref", second, "topos-nopref", namespace))
        assert (await cluster.bound("by-nopref"))["spec"]["nodeName"] == first
        decided = {
            key: attempt.profile
            for key in (f"{namespace}/by-topos", f"{namespace}/by-nopref")
            if (attempt := runtime.scheduler.last_attempt(key)) is not None
        }
        assert decided == {
            f"{namespace}/by-topos": "topos",
            f"{namespace}/by-nopref": "topos-nopref",
        }
        # A pod naming no configured profile is not ours: never queued, never tried, unbound
        # (created before the others: a watch that took it would have queued it first).
        assert runtime.scheduler.queue.named(f"{namespace}/by-other") is None
        assert runtime.scheduler.last_attempt(f"{namespace}/by-other") is None
        assert not (await cluster.pod("by-other"))["spec"].get("nodeName")
