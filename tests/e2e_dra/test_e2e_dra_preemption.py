"""Preemption frees DRA claims, on the real control plane: a high-priority pod whose claim fits
only where a low-priority pod's claim holds every GPU evicts that pod, waits until
kube-controller-manager has released the victim's claim, and is then placed on those GPUs. No
kubelet runs here, so the evicted pod stays ``Terminating`` until the test removes it (the
kubelet's part)."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest

from common.kube import PODS, KubeClient, NotFound
from devcluster.kube_wait import wait_for_event, wait_for_object
from tests.e2e_dra.conftest import dra_fleet
from tests.support.dra import claim, claim_pod, gpu_indices, reserved_uids
from tests.support.gpu_cluster import PRIORITY_CLASSES

pytestmark = pytest.mark.kube


def prioritised(obj: dict[str, Any], priority_class: str) -> dict[str, Any]:
    obj["spec"]["priorityClassName"] = priority_class
    return obj


async def test_a_claim_pod_preempts_the_pod_whose_claim_holds_the_gpus(
    kube: KubeClient, kubeconfig: Path, namespace: str, directory: Path
) -> None:
    run = uuid.uuid4().hex[:6]
    low, high = f"low-{run}", f"high-{run}"
    for name, value in ((low, 10), (high, 1000)):
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
        await kube.create(PRIORITY_CLASSES, {**body, "metadata": {"name": name}, "value": value})
    try:
        async with dra_fleet(kube, kubeconfig, namespace, directory) as fleet:
            cls = fleet.class_name
            await fleet.create(claim("held", 8, device_class=cls))
            victim = await fleet.create(
                prioritised(claim_pod("victim", claim_name="held", scheduler="topos"), low)
            )
            await fleet.bound("victim")
            await fleet.claim("held")

            await fleet.create(claim("wanted", 4, device_class=cls))
            await fleet.create(
                prioritised(claim_pod("urgent", claim_name="wanted", scheduler="topos"), high)
            )
            preempted = await wait_for_event(kube, namespace, reason="Preempted", name="victim")
            assert f"Preempted by {namespace}/urgent (priority 1000)" in preempted["message"]
            preempting = await wait_for_event(kube, namespace, reason="Preempting", name="urgent")
            assert f"preempts {namespace}/victim (priority 10, 1 pod)" in preempting["message"]
            assert f"freeing ResourceClaim(s) {namespace}/held" in preempting["message"]
            node = fleet.nodes[0].name
            await wait_for_object(
                kube,
                PODS,
                "urgent",
                lambda p: (p.get("status") or {}).get("nominatedNodeName") == node,
                namespace=namespace,
                what="urgent nominated",
            )
            await wait_for_object(
                kube,
                PODS,
                "victim",
                lambda p: bool(p["metadata"].get("deletionTimestamp")),
                namespace=namespace,
                what="victim evicted",
            )
            # The claim is still the victim's while the victim terminates: urgent waits.
            still = await fleet.claim("held")
            assert reserved_uids(still) == [victim["metadata"]["uid"]]

            with contextlib.suppress(NotFound):  # the kubelet's part: the pod is gone
                await kube.delete(PODS, "victim", namespace=namespace, grace_period_seconds=0)
            released = await fleet.claim(
                "held", lambda c: not (c.get("status") or {}).get("allocation")
            )
            assert not reserved_uids(released)

            urgent = await fleet.bound("urgent")
            assert urgent["spec"]["nodeName"] == node
            wanted = await fleet.claim("wanted")
            assert reserved_uids(wanted) == [urgent["metadata"]["uid"]]
            assert len(gpu_indices(wanted)) == 4
    finally:
        for name in (low, high):
            with contextlib.suppress(NotFound):
                await kube.delete(PRIORITY_CLASSES, name)
