"""deploy/agent-node-policy.yaml on the real API server: the agent's ServiceAccount, holding the
cluster-wide ``nodes`` patch RBAC allows, may still change only the Node its pod is bound to, only
keys of its own vocabularies, and never a Node's spec. The agent acts with a real pod-bound token
(TokenRequest with ``boundObjectRef``), exactly as in its DaemonSet pod.

The policy is removed again afterwards: it matches the agent's user name, and other tests act as
that user with client certificates (which carry no node).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.kube import NODES, Forbidden, Invalid, KubeClient, KubeError
from tests.support.deploy import NAMESPACE, Kubectl, apply_for_real
from tests.support.kube_objects import create_agent_pod, create_node
from tests.support.polling import eventually

POLICY = "topos-agent-own-node"


def _token_kubeconfig(admin: Path, token: str, path: Path) -> Path:
    config = yaml.safe_load(admin.read_text())
    config["users"] = [{"name": "agent", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "agent"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def policy(kubectl: Kubectl) -> Iterator[Kubectl]:
    apply_for_real(kubectl, "namespace.yaml", "agent-rbac.yaml", "agent-node-policy.yaml")
    yield kubectl
    kubectl("delete", "validatingadmissionpolicybinding", POLICY, "--ignore-not-found")
    kubectl("delete", "validatingadmissionpolicy", POLICY, "--ignore-not-found")


async def _node(kube: KubeClient, name: str) -> None:
    await create_node(
        kube,
        name,
        labels={"topos.io/gpu.count": "8"},
        annotations={"example.com/owner": "ops"},
    )


async def _agent_client(
    kube: KubeClient, kubeconfig: Path, node: str, tmp_path: Path, unique_name: Callable[[str], str]
) -> KubeClient:
    pod = await create_agent_pod(
        kube, NAMESPACE, name=unique_name("topos-agent"), node=node, service_account="topos-agent"
    )
    token = await kube.request_token(
        namespace=NAMESPACE, service_account="topos-agent", bound_pod=pod
    )
    path = await asyncio.to_thread(
        _token_kubeconfig, kubeconfig, token, tmp_path / "agent.kubeconfig"
    )
    return await KubeClient.connect(path)


def _labels(patch: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"labels": patch}}


async def test_agent_changes_only_its_own_nodes_metadata(
    policy: Kubectl,
    kube: KubeClient,
    kubeconfig: Path,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    own, other = unique_name("gpu"), unique_name("gpu")
    await _node(kube, own)
    await _node(kube, other)
    agent = await _agent_client(kube, kubeconfig, own, tmp_path, unique_name)
    try:
        # The policy takes effect once the API server has loaded it: wait (bounded) until the
        # other node is protected.
        async def refused() -> KubeError | None:
            try:
                await agent.patch(NODES, other, _labels({"topos.io/gpu.count": "4"}))
            except (Forbidden, Invalid) as exc:
                return exc
            return None

        refusal = await eventually(refused, what="the policy to take effect", interval_s=0.1)
        assert f"may only change the Node its pod runs on, not {other}" in refusal.message

        # its own node: its own labels and annotations, added, changed and removed
        await agent.patch(
            NODES, own, _labels({"topos.io/gpu.count": "4", "nvidia.com/gpu.count": "4"})
        )
        await agent.patch(NODES, own, {"metadata": {"annotations": {"topos.io/topology": "{}"}}})
        await agent.patch(NODES, own, _labels({"nvidia.com/gpu.count": None}))
        node = await kube.get(NODES, own)
        assert node["metadata"]["labels"]["topos.io/gpu.count"] == "4"
        assert "nvidia.com/gpu.count" not in node["metadata"]["labels"]

        refused: list[dict[str, Any]] = [
            _labels({"kubernetes.io/hostname": "elsewhere"}),  # someone else's label
            _labels({"kubernetes.io/hostname": None}),  # removing someone else's label
            _labels({"node-role.kubernetes.io/control-plane": ""}),
            {"metadata": {"annotations": {"example.com/owner": "mallory"}}},
            {"spec": {"unschedulable": True}},  # cordon
            {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}},
        ]
        for patch in refused:
            with pytest.raises((Forbidden, Invalid)):
                await agent.patch(NODES, own, patch)
        node = await kube.get(NODES, own)
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == own
        assert node["metadata"]["annotations"]["example.com/owner"] == "ops"
        assert not node["spec"].get("unschedulable")

        # everyone else is untouched by the policy
        await kube.patch(NODES, other, _labels({"example.com/rack": "r1"}))
    finally:
        await agent.close()


def _condition(kind: str, status: str) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": kind, "status": status, "reason": "Test"}]}}


async def test_agent_sets_only_its_condition_in_its_nodes_status(
    policy: Kubectl,
    kube: KubeClient,
    kubeconfig: Path,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    own, other = unique_name("gpu"), unique_name("gpu")
    await _node(kube, own)
    await _node(kube, other)
    await kube.patch(NODES, own, {"status": {"capacity": {"cpu": "8"}}}, subresource="status")
    agent = await _agent_client(kube, kubeconfig, own, tmp_path, unique_name)
    try:

        async def refused() -> KubeError | None:
            try:
                await agent.patch(
                    NODES,
                    other,
                    _condition("ToposGPUHealthy", "False"),
                    patch_type="strategic",
                    subresource="status",
                )
            except (Forbidden, Invalid) as exc:
                return exc
            return None

        refusal = await eventually(refused, what="the policy to take effect", interval_s=0.1)
        assert f"may only change the Node its pod runs on, not {other}" in refusal.message

        await agent.patch(
            NODES,
            own,
            _condition("ToposGPUHealthy", "False"),
            patch_type="strategic",
            subresource="status",
        )
        for patch in (
            _condition("Ready", "False"),  # someone else's condition
            {"status": {"capacity": {"cpu": "64"}}},  # forged capacity
            {"status": {"allocatable": {"nvidia.com/gpu": "8"}}},
            {"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}},  # forged kubelet
            {"status": {"images": [{"names": ["registry.example/forged:1"], "sizeBytes": 1}]}},
        ):
            with pytest.raises((Forbidden, Invalid)) as caught:
                await agent.patch(NODES, own, patch, patch_type="strategic", subresource="status")
            assert "may only change its own condition" in str(caught.value)
        status = (await kube.get(NODES, own))["status"]
        kinds = {c["type"]: c["status"] for c in status.get("conditions", [])}
        assert kinds == {"ToposGPUHealthy": "False"}
        assert status["capacity"] == {"cpu": "8"}
    finally:
        await agent.close()
