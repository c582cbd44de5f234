"""deploy/agent-daemonset.yaml: the DaemonSet runs only on GPU nodes with the downward-API node
name and a read-only PodResources mount, and its flags are ones the agent accepts.

The API server's verdict on the manifests (server-side dry run) is in tests/deploy/
test_manifests.py; the agent's grants (exactly get/patch on nodes) in tests/deploy/test_rbac.py,
and its real token patching only its own Node in tests/deploy/test_agent_policy.py."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from agent.settings import add_arguments, settings_from_args

REPO = Path(__file__).resolve().parents[2]
DAEMONSET = REPO / "deploy" / "agent-daemonset.yaml"


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
