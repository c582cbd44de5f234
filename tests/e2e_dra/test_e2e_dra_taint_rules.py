"""DeviceTaintRules (KEP-5055) end to end on the real control plane, which serves them
(``DRADeviceTaintRules``, beta and off by default in Kubernetes 1.36, turned on in
``devcluster/controlplane.py``) and runs kube-controller-manager's device-taint-eviction
controller: a rule tainting one node's GPUs ``NoSchedule`` keeps a new pod off them and its
refusal names the rule; a rule tainting a GPU under a running pod ``NoExecute`` gets the pod
evicted by kube-controller-manager, and the replacement goes to GPUs no rule taints."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from common.kube import DEVICE_TAINT_RULES, EVENTS, PODS, KubeClient, KubeError, NotFound
from devcluster.dra import DRIVER
from devcluster.kube_wait import scheduled_message, wait_for, wait_for_object
from tests.e2e_dra.conftest import DraFleet, dra_fleet
from tests.support.dra import claim_pod, claim_template

pytestmark = pytest.mark.kube


def rule(name: str, pool: str, effect: str, device: str = "") -> dict[str, Any]:
    selector = {"driver": DRIVER, "pool": pool} | ({"device": device} if device else {})
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": selector,
            "taint": {"key": "example.com/gpu-maintenance", "value": "swap", "effect": effect},
        },
    }


@contextlib.asynccontextmanager
async def rules(kube: KubeClient, *made: dict[str, Any]) -> AsyncIterator[list[str]]:
    names: list[str] = []
    try:
        for r in made:
            names.append((await kube.create(DEVICE_TAINT_RULES, r))["metadata"]["name"])
        yield names
    finally:
        for name in names:
            with contextlib.suppress(NotFound, KubeError):
                await kube.delete(DEVICE_TAINT_RULES, name)


async def evicted(fleet: DraFleet, name: str) -> str:
    """``deleted`` or ``terminating`` once the pod is gone or being deleted (no kubelet here
    finishes a graceful deletion)."""

    def check(pods: Sequence[dict[str, Any]]) -> str | None:
        if not pods:
            return "deleted"
        return "terminating" if pods[0]["metadata"].get("deletionTimestamp") else None

    return await wait_for(
        fleet.kube, PODS, check, namespace=fleet.namespace, name=name, what=f"{name} evicted"
    )


async def test_rules_keep_pods_off_tainted_gpus_evict_and_the_replacement_goes_elsewhere(
    kube: KubeClient, kubeconfig: Path, namespace: str, directory: Path
) -> None:
    async with dra_fleet(kube, kubeconfig, namespace, directory, count=2) as fleet:
        a, b = (n.name for n in fleet.nodes)
        await fleet.create(claim_template("all", 8, device_class=fleet.class_name))
        async with rules(kube, rule(f"upkeep-{b}", b, "NoSchedule")) as names:
            await fleet.create(claim_pod("first", template="all", scheduler="topos"))
            first = await fleet.bound("first")
            assert first["spec"]["nodeName"] == a  # b's GPUs are tainted

            # gpu-5 under the running pod fails: NoExecute. kube-controller-manager evicts.
            fail = rule(f"xid-{a}-gpu5", a, "NoExecute", device="gpu-5")
            names.append((await kube.create(DEVICE_TAINT_RULES, fail))["metadata"]["name"])
            assert await evicted(fleet, "first") in ("deleted", "terminating")
            with contextlib.suppress(NotFound):  # what the kubelet would finish
                await kube.delete(PODS, "first", namespace=namespace, grace_period_seconds=0)

            # The replacement (as a Job would make): a lacks gpu-5, b is under upkeep.
            await fleet.create(claim_pod("second", template="all", scheduler="topos"))
            refused = await wait_for_object(
                kube,
                PODS,
                "second",
                lambda p: "DeviceTaintRule" in (scheduled_message(p, status="False") or ""),
                namespace=namespace,
                what="second refused naming a rule",
            )
            message = scheduled_message(refused, status="False") or ""
            assert f"from DeviceTaintRule upkeep-{b}" in message, message
            taint = "example.com/gpu-maintenance=swap:NoExecute"
            assert f"gpu-5: {taint} from DeviceTaintRule xid-{a}-gpu5" in message, message

            await kube.delete(DEVICE_TAINT_RULES, f"upkeep-{b}")  # upkeep done
            second = await fleet.bound("second")
            assert second["spec"]["nodeName"] == b
            reasons = {
                e.get("reason")
                for e in (await kube.list(EVENTS, namespace=namespace))["items"]
                if e["involvedObject"]["name"] == "first"
            }
            assert "DeviceTaintManagerEviction" in reasons, reasons
