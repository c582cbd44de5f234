"""deploy/helm/topos, the Helm chart, kept in step with the kustomize base: `helm lint` passes; with
its default values `helm template` renders exactly the objects `kubectl kustomize deploy/` does;
its CRDs are the files of deploy/crds/ (one source: a CRD added there is in the chart too);
non-default values (image, namespace, auth and TLS off, a nodeSelector, a config key) land where
they should, in a config file the coordinator's own loader accepts and objects the real API server
accepts (server-side dry run).

Two documented differences are normalised away: the coordinator's config file is compared as the
YAML it parses to (Helm writes it from the values, without the base's comments), and CRDs carry
no `app.kubernetes.io/version` label in the chart (Helm installs `crds/` files verbatim, never
templated; the base labels every object it lists).
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator.app.config.load import parse_config
from devcluster import helm as helm_build
from devcluster.binaries import Binaries, BinariesUnavailable
from tests.support.ci import skip_or_fail
from tests.support.deploy import DEPLOY, Kubectl

CHART = DEPLOY / "helm" / "topos"
VERSION_LABEL = "app.kubernetes.io/version"
Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
Helm = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    try:
        binary = helm_build.find()
    except BinariesUnavailable as exc:
        skip_or_fail(str(exc))
    if binary is None:
        skip_or_fail("helm is not built (python -m devcluster.helm ensure; `make test` does it)")
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        **{f"HELM_{d}_HOME": str(home / d.lower()) for d in ("CACHE", "CONFIG", "DATA")},
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(binary), *args], capture_output=True, text=True, timeout=120, env=env, check=False
        )
        assert done.returncode == 0, f"helm {' '.join(args[:2])} failed:\n{done.stderr}"
        return done

    return run


def _objects(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


def _template(helm: Helm, *values: str) -> dict[Key, dict[str, Any]]:
    done = helm("template", "topos", str(CHART), "--include-crds", *values)
    objects = _objects(done.stdout)
    keys = [_key(o) for o in objects]
    assert len(keys) == len(set(keys)), "the chart renders an object twice"
    return dict(zip(keys, objects, strict=True))


def _kustomize(k8s_binaries: Binaries, folder: Path = DEPLOY) -> dict[Key, dict[str, Any]]:
    done = subprocess.run(
        [str(k8s_binaries.kubectl), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return {_key(o): o for o in _objects(done.stdout)}


def _config(objects: dict[Key, dict[str, Any]], namespace: str = "topos-system") -> Any:
    configmap = objects["v1", "ConfigMap", namespace, "topos-coordinator-config"]
    return yaml.safe_load(configmap["data"]["config.yaml"])


def _normalised(obj: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(obj))
    if out["kind"] == "ConfigMap" and "config.yaml" in out.get("data", {}):
        out["data"]["config.yaml"] = yaml.safe_load(out["data"]["config.yaml"])
    if out["kind"] == "CustomResourceDefinition":
        out["metadata"].get("labels", {}).pop(VERSION_LABEL, None)
    return out


def test_helm_lint_passes_with_default_and_other_values(helm: Helm) -> None:
    helm("lint", "--strict", str(CHART))
    helm("lint", "--strict", str(CHART), "--set", "auth.enabled=false,tls.enabled=false")


def test_default_values_render_the_objects_of_the_kustomize_base(
    helm: Helm, k8s_binaries: Binaries
) -> None:
    chart = {k: _normalised(v) for k, v in _template(helm).items()}
    base = {k: _normalised(v) for k, v in _kustomize(k8s_binaries).items()}
    only_chart = sorted(set(chart) - set(base))
    only_base = sorted(set(base) - set(chart))
    assert not only_chart, f"in the chart, not in deploy/kustomization.yaml: {only_chart}"
    assert not only_base, f"in the kustomize base, not in the chart: {only_base}"
    for key, want in base.items():
        got = chart[key]
        if got != want:
            diff = difflib.unified_diff(
                json.dumps(want, indent=1, sort_keys=True).splitlines(),
                json.dumps(got, indent=1, sort_keys=True).splitlines(),
                "kustomize",
                "helm",
                lineterm="",
            )
            pytest.fail(f"{key} differs:\n" + "\n".join(diff))
    assert not any("helm.sh/chart" in json.dumps(o) for o in chart.values())


def test_the_model_cache_mount_is_off_by_default_and_the_same_in_both_when_on(
    helm: Helm, k8s_binaries: Binaries, tmp_path: Path
) -> None:
    """``agent.modelCache.hostPath`` (Helm) and ``deploy/components/model-cache`` (kustomize)
    give the agent the same read-only hostPath and ``--model-cache-dir``."""
    key = ("apps/v1", "DaemonSet", "topos-system", "topos-agent")
    off = _template(helm)[key]["spec"]["template"]["spec"]
    assert "model-cache" not in json.dumps(off)
    hub = "/var/lib/huggingface/hub"
    chart = _template(helm, "--set", f"agent.modelCache.hostPath={hub}")[key]
    shutil.copytree(DEPLOY, tmp_path / "base")
    (tmp_path / "kustomization.yaml").write_text(
        "resources: [base]\ncomponents: [base/components/model-cache]\n"
    )
    base = _kustomize(k8s_binaries, tmp_path)[key]
    for obj in (chart, base):
        pod = obj["spec"]["template"]["spec"]
        (agent,) = pod["containers"]
        assert "--model-cache-dir=/var/cache/topos/models" in agent["args"]
        mount = next(m for m in agent["volumeMounts"] if m["name"] == "model-cache")
        assert mount == {
            "name": "model-cache",
            "mountPath": "/var/cache/topos/models",
            "readOnly": True,
        }
        volume = next(v for v in pod["volumes"] if v["name"] == "model-cache")
        assert volume["hostPath"] == {"path": hub, "type": "DirectoryOrCreate"}


def test_the_charts_crds_are_the_files_of_deploy_crds(helm: Helm) -> None:
    assert (CHART / "crds").resolve() == (DEPLOY / "crds").resolve()
    on_disk = {
        doc["metadata"]["name"]
        for path in sorted((DEPLOY / "crds").glob("*.yaml"))
        for doc in _objects(path.read_text())
    }
    rendered = {key[3] for key in _template(helm) if key[1] == "CustomResourceDefinition"}
    assert "podgroups.scheduling.x-k8s.io" in on_disk
    assert rendered == on_disk


def test_non_default_values_land_where_they_should(helm: Helm) -> None:
    objects = _template(
        helm,
        "--set",
        ",".join(
            (
                "namespace=gpu-sched",
                "images.coordinator.tag=1.2.3",
                "images.agent.repository=registry.local/topos-agent",
                "images.agent.pullPolicy=Always",
                "auth.enabled=false",
                "tls.enabled=false",
                "agent.nodeSelector.pool=gpu",
                "agent.tolerations=null",
                "coordinator.replicas=3",
                "coordinator.config.scheduling.packing=spread",
                "coordinator.resources.limits.memory=4Gi",
                "labelSets=null",
            )
        ),
    )
    namespaces = {key[2] for key in objects if key[2]}
    assert namespaces == {"gpu-sched"}
    assert ("v1", "Namespace", "", "gpu-sched") in objects

    deployment = objects["apps/v1", "Deployment", "gpu-sched", "topos-coordinator"]["spec"]
    assert deployment["replicas"] == 3
    pod = deployment["template"]["spec"]
    (coordinator,) = pod["containers"]
    assert coordinator["image"] == "topos/coordinator:1.2.3"
    assert coordinator["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert coordinator["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
    assert [v["name"] for v in pod["volumes"]] == ["config", "tmp"]  # no TLS Secret

    daemonset = objects["apps/v1", "DaemonSet", "gpu-sched", "topos-agent"]["spec"]
    agent_pod = daemonset["template"]["spec"]
    (agent,) = agent_pod["containers"]
    assert agent["image"] == "registry.local/topos-agent:0.1.0"
    assert agent["imagePullPolicy"] == "Always"
    assert agent_pod["nodeSelector"] == {"pool": "gpu"}
    assert "tolerations" not in agent_pod
    assert agent["args"][0] == "--coordinator=http://topos-coordinator.gpu-sched.svc:80"
    assert not any(a.startswith("--coordinator-ca") for a in agent["args"])
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["TOPOS_LABELS_COMPAT"] == "none"

    service = objects["v1", "Service", "gpu-sched", "topos-coordinator"]["spec"]
    assert service["ports"][0]["port"] == 80
    assert service["ports"][0]["appProtocol"] == "http"
    policy = objects[
        "admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", "", "topos-agent-own-node"
    ]
    assert "system:serviceaccount:gpu-sched:topos-agent" in json.dumps(policy)

    config = _config(objects, "gpu-sched")
    assert config["auth"]["enabled"] is False
    assert config["auth"]["agentServiceAccounts"] == ["gpu-sched/topos-agent"]
    assert config["leaderElection"]["namespace"] == "gpu-sched"
    assert "tls" not in config
    assert config["scheduling"]["packing"] == "spread"
    assert config["scheduling"]["weights"]["numa_fit"] == 3  # merged into, not replaced
    parsed = parse_config(config)  # the coordinator starts with it
    assert parsed.auth.enabled is False


def test_default_config_is_one_the_coordinator_accepts(helm: Helm) -> None:
    config = _config(_template(helm))
    parsed = parse_config(config)
    assert parsed.auth.enabled is True
    assert parsed.tls.cert_file == "/etc/topos/tls/tls.crt"


@pytest.mark.kube
def test_the_real_api_server_accepts_a_non_default_render(
    helm: Helm, kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    done = helm(
        "template",
        "topos",
        str(CHART),
        "--set",
        f"namespace={namespace},createNamespace=false,tls.enabled=false,auth.enabled=false,"
        "agent.nodeSelector.pool=gpu",
    )
    manifest = tmp_path / "topos.yaml"
    manifest.write_text(done.stdout)
    applied = kubectl("apply", "--dry-run=server", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert "daemonset.apps/topos-agent" in applied.stdout
