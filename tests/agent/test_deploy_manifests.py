"""deploy/agent-daemonset.yaml and deploy/agent-rbac.yaml: the API server accepts them, the
DaemonSet runs only on GPU nodes with the downward-API node name and a read-only PodResources
mount, its flags are ones the agent accepts, and the RBAC grants exactly get/patch on nodes —
an identity bound to it can publish labels and can do nothing else."""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.app import add_arguments, settings_from_args
from common.kube import NODES, PODS, Forbidden, KubeClient
from devcluster.controlplane import ControlPlane

REPO = Path(__file__).resolve().parents[2]
DAEMONSET = REPO / "deploy" / "agent-daemonset.yaml"
RBAC = REPO / "deploy" / "agent-rbac.yaml"
SA_USER = "system:serviceaccount:topos-system:topos-agent"

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def _daemonset() -> dict[str, Any]:
    doc = yaml.safe_load(DAEMONSET.read_text())
    assert doc["kind"] == "DaemonSet"
    return doc  # type: ignore[no-any-return]


def test_daemonset_shape() -> None:
    spec = _daemonset()["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    keys = {expr["key"] for term in terms for expr in term["matchExpressions"]}
    assert "nvidia.com/gpu.present" in keys  # GPU nodes only
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    (container,) = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert mounts["pod-resources"]["readOnly"] is True
    assert mounts["pod-resources"]["mountPath"] == "/var/lib/kubelet/pod-resources"
    assert volumes["pod-resources"]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    assert security.get("privileged", False) is False
    assert spec["serviceAccountName"] == "topos-agent"


def test_daemonset_flags_are_accepted_by_the_agent() -> None:
    (container,) = _daemonset()["spec"]["template"]["spec"]["containers"]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(container["args"])
    env = {e["name"]: e.get("value", "") for e in container["env"]}
    env["NODE_NAME"] = "gpu-node-1"
    settings = settings_from_args(args, environ=env)
    assert settings.node_name == "gpu-node-1"
    assert settings.coordinator == "https://topos-coordinator.topos-system.svc:443"
    assert settings.listen == "0.0.0.0:9400"
    port = container["ports"][0]["containerPort"]
    assert settings.listen.endswith(f":{port}")


def test_api_server_accepts_the_manifests(kubectl: Kubectl) -> None:
    created = kubectl("create", "namespace", "topos-system")
    assert created.returncode == 0 or "AlreadyExists" in created.stderr, created.stderr
    applied = kubectl("apply", "-f", str(RBAC))
    assert applied.returncode == 0, applied.stderr
    dry = kubectl("apply", "--dry-run=server", "-f", str(DAEMONSET))
    assert dry.returncode == 0, dry.stderr
    assert "daemonset.apps/topos-agent" in dry.stdout


async def test_rbac_allows_publishing_and_nothing_else(
    kubectl: Kubectl,
    kube: KubeClient,
    control_plane: ControlPlane,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    created = kubectl("create", "namespace", "topos-system")
    assert created.returncode == 0 or "AlreadyExists" in created.stderr, created.stderr
    applied = kubectl("apply", "-f", str(RBAC))
    assert applied.returncode == 0, applied.stderr
    name = unique_name("node")
    await kube.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})

    path = control_plane.write_user_kubeconfig(
        tmp_path / "agent.kubeconfig",
        user=SA_USER,
        groups=("system:serviceaccounts", "system:serviceaccounts:topos-system"),
    )
    agent = await KubeClient.connect(path)
    try:
        node = await agent.get(NODES, name)
        assert node["metadata"]["name"] == name
        await agent.patch(NODES, name, {"metadata": {"labels": {"topos.io/gpu.count": "8"}}})
        with pytest.raises(Forbidden):
            await agent.list(NODES)
        with pytest.raises(Forbidden):
            await agent.delete(NODES, name)
        with pytest.raises(Forbidden):
            await agent.list(PODS, namespace="default")
        with pytest.raises(Forbidden):
            await agent.create(
                NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name + "-x"}}
            )
    finally:
        await agent.close()
    assert (await kube.get(NODES, name))["metadata"]["labels"]["topos.io/gpu.count"] == "8"
