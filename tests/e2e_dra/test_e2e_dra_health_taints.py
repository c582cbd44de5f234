"""Unhealthy GPUs published as DRA device taints, end to end on the real control plane (which
serves DeviceTaintRules and runs kube-controller-manager: ``devcluster/controlplane.py``): a DRA
node whose GPUs NVIDIA's driver publishes (``devcluster.dra``) runs the real ``topos agent`` on
the C NVML library; GPU 3 gets uncorrected ECC errors in its NVML; the coordinator writes a
``DeviceTaintRule`` selecting exactly that device (``topos.io/gpu-unhealthy=uncorrected-ecc``,
labelled ``app.kubernetes.io/managed-by: topos``).

- ``NoSchedule``: a new pod asking all 8 GPUs is refused naming the rule; the GPU heals, the
  rule is deleted, and the pod gets all 8, gpu-3 among them. An operator's rule on the same
  device is never touched.
- ``NoExecute``: the pod already running on gpu-3 is evicted by kube-controller-manager's
  device-taint-eviction controller (Topos evicts nothing for it)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from common.kube import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    EVENTS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_SLICES,
    KubeClient,
    KubeError,
    NotFound,
)
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from devcluster.churn.fleet import RUN_LABEL, register_nodes
from devcluster.dra import DRIVER, publish_node
from devcluster.kube_wait import scheduled_message, wait_for, wait_for_object
from tests.support.dra import claim_pod, claim_template, devices, gpu_class, pod_claim
from tests.support.nvml_agents import Machine, nvml_agents
from tests.support.polling import eventually

pytestmark = pytest.mark.kube

PROFILE = "dgx-a100"
OURS = "app.kubernetes.io/managed-by=topos"


@dataclass
class Sick:
    """The test's DRA node, its NVML, and where things are."""

    kube: KubeClient
    namespace: str
    node: str
    machine: Machine

    def gpu3(self, ecc_uncorrected: int) -> None:
        """GPU 3's uncorrected ECC count in the node's NVML (read by the agent's next cycle)."""
        self.machine.fake.set_health(3, ecc_uncorrected=ecc_uncorrected)
        self.machine.write()

    async def rule(self) -> dict[str, Any]:
        (rule,) = await wait_for(
            self.kube,
            DEVICE_TAINT_RULES,
            lambda rules: on_device(self.node, "gpu-3")(rules) or None,
            label_selector=OURS,
            what="Topos's DeviceTaintRule for gpu-3",
        )
        return rule

    async def pod_for_all_gpus(self, name: str) -> None:
        await self.kube.create(
            PODS, claim_pod(name, template="all", scheduler="topos"), namespace=self.namespace
        )

    async def bound(self, name: str) -> dict[str, Any]:
        return await wait_for_object(
            self.kube,
            PODS,
            name,
            lambda p: bool(p["spec"].get("nodeName")),
            namespace=self.namespace,
            what=f"{name} bound",
        )


def on_device(pool: str, device: str) -> Any:
    def check(rules: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            r
            for r in rules
            if r["spec"].get("deviceSelector", {}).get("pool") == pool
            and r["spec"]["deviceSelector"].get("device") == device
        ]

    return check


async def _delete(kube: KubeClient, resource: Any, name: str, **kw: Any) -> None:
    with contextlib.suppress(NotFound, KubeError):
        await kube.delete(resource, name, **kw)


@contextlib.asynccontextmanager
async def dra_node(
    kube: KubeClient, kubeconfig: Path, namespace: str, directory: Path, effect: str
) -> AsyncIterator[Sick]:
    """One dgx-a100 whose GPUs only DRA serves, its agent on the C NVML, a coordinator
    publishing health taints with ``effect``, and a claim template ``all`` (8 GPUs)."""
    run = uuid.uuid4().hex[:6]
    (sim,) = await register_nodes(kube, run, ((PROFILE, 1),))
    node = sim.name
    class_name = f"gpu-{run}.nvidia.com"
    slices: list[str] = []
    try:
        gone = {"nvidia.com/gpu": None}
        await kube.patch(
            NODES, node, {"status": {"capacity": gone, "allocatable": gone}}, subresource="status"
        )
        slices.append((await publish_node(kube, node, PROFILE))["metadata"]["name"])
        await kube.create(DEVICE_CLASSES, gpu_class(class_name))
        await kube.create(
            RESOURCE_CLAIM_TEMPLATES,
            claim_template("all", 8, device_class=class_name),
            namespace=namespace,
        )
        config = parse_config(
            {
                "auth": {"enabled": False},
                "scheduler": {"namespace": namespace, "nodeSelector": {RUN_LABEL: run}},
                "health": {"deviceTaints": {"enabled": True, "effect": effect}},
            }
        )
        async with running(wire(config, KubeBackend(str(kubeconfig)))) as url:
            with nvml_agents(kubeconfig, url, [node], directory, PROFILE) as machines:
                async with aiohttp.ClientSession() as http:

                    async def connected() -> bool | None:
                        async with http.get(f"{url}/v1/nodes/{node}") as resp:
                            return (await resp.json()).get("connected") or None

                    await eventually(connected, what=f"{node}'s agent to connect")
                yield Sick(kube, namespace, node, machines[node])
    finally:
        for r in (await kube.list(DEVICE_TAINT_RULES, label_selector=OURS))["items"]:
            if r["spec"].get("deviceSelector", {}).get("pool") == node:
                await _delete(kube, DEVICE_TAINT_RULES, r["metadata"]["name"])
        await _delete(kube, DEVICE_CLASSES, class_name)
        for s in slices:
            await _delete(kube, RESOURCE_SLICES, s)
        await _delete(kube, NODES, node)


async def test_an_unhealthy_gpu_becomes_a_device_taint_rule_and_healthy_again_removes_it(
    kube: KubeClient, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    async with dra_node(kube, kubeconfig, namespace, tmp_path, "NoSchedule") as sick:
        node = sick.node
        operator_rule = f"upkeep-{node}"
        # An operator's informational rule on the same device: Topos leaves it alone.
        await kube.create(
            DEVICE_TAINT_RULES,
            {
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRule",
                "metadata": {"name": operator_rule},
                "spec": {
                    "deviceSelector": {"driver": DRIVER, "pool": node, "device": "gpu-3"},
                    "taint": {"key": "example.com/watch", "value": "on", "effect": "None"},
                },
            },
        )
        try:
            # nothing is unhealthy: Topos has no rule
            assert not (await kube.list(DEVICE_TAINT_RULES, label_selector=OURS))["items"]

            sick.gpu3(ecc_uncorrected=2)
            wrote = time.monotonic()
            rule = await sick.rule()
            to_rule_s = time.monotonic() - wrote
            name = rule["metadata"]["name"]
            assert name == f"topos-gpu-unhealthy.{node}.gpu-3"
            assert rule["spec"]["deviceSelector"] == {
                "driver": DRIVER,
                "pool": node,
                "device": "gpu-3",
            }
            taint = rule["spec"]["taint"]
            assert (taint["key"], taint["value"], taint["effect"]) == (
                "topos.io/gpu-unhealthy",
                "uncorrected-ecc",
                "NoSchedule",
            )

            # A new pod asking for all 8 GPUs: refused, and the refusal names the rule.
            await sick.pod_for_all_gpus("p")
            refused = await wait_for_object(
                kube,
                PODS,
                "p",
                lambda p: "DeviceTaintRule" in (scheduled_message(p, status="False") or ""),
                namespace=namespace,
                what="p refused naming Topos's rule",
            )
            message = scheduled_message(refused, status="False") or ""
            says = "topos.io/gpu-unhealthy=uncorrected-ecc:NoSchedule"
            assert f"gpu-3: {says} from DeviceTaintRule {name}" in message, message

            # The GPU is healthy again (a reset cleared the counters): the rule goes.
            sick.gpu3(ecc_uncorrected=0)
            await wait_for(
                kube,
                DEVICE_TAINT_RULES,
                lambda rules: True if not on_device(node, "gpu-3")(rules) else None,
                label_selector=OURS,
                what="Topos's rule for gpu-3 deleted",
            )
            bound = await sick.bound("p")
            claim = await pod_claim(
                kube,
                namespace,
                "p",
                lambda c: bool((c.get("status") or {}).get("allocation")),
                what="p's claim allocated",
            )
            assert bound["spec"]["nodeName"] == node
            assert (DRIVER, node, "gpu-3") in devices(claim)
            still = await kube.get(DEVICE_TAINT_RULES, operator_rule)  # never touched
            assert still["spec"]["taint"]["key"] == "example.com/watch"
            assert "app.kubernetes.io/managed-by" not in (still["metadata"].get("labels") or {})
            print(f"GPU unhealthy in NVML → DeviceTaintRule: {to_rule_s:.1f} s")
        finally:
            await _delete(kube, DEVICE_TAINT_RULES, operator_rule)


async def test_no_execute_gets_the_pod_on_the_gpu_evicted_by_kube_controller_manager(
    kube: KubeClient, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    async with dra_node(kube, kubeconfig, namespace, tmp_path, "NoExecute") as sick:
        await sick.pod_for_all_gpus("running")
        assert (await sick.bound("running"))["spec"]["nodeName"] == sick.node

        sick.gpu3(ecc_uncorrected=2)
        rule = await sick.rule()
        assert rule["spec"]["taint"]["effect"] == "NoExecute"

        def gone(pods: Sequence[dict[str, Any]]) -> str | None:
            if not pods:
                return "deleted"
            return "terminating" if pods[0]["metadata"].get("deletionTimestamp") else None

        assert await wait_for(
            kube, PODS, gone, namespace=namespace, name="running", what="running evicted"
        ) in ("deleted", "terminating")
        reasons = {
            e.get("reason")
            for e in (await kube.list(EVENTS, namespace=namespace))["items"]
            if e["involvedObject"]["name"] == "running"
        }
        assert "DeviceTaintManagerEviction" in reasons, reasons
