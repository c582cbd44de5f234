"""What the harness installs for a workload controller, read from its module: webhook
configurations patched as the module's kustomization patches them, renamed with its
``namePrefix``, and pointed at the manager on loopback; the catalog's requirements; bad names and
bad patches explained."""

from __future__ import annotations

import base64
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from devcluster.binaries import BinariesUnavailable
from devcluster.subprocess_env import subprocess_env
from devcluster.workloads import build
from devcluster.workloads.catalog import (
    CONTROLLERS,
    JOBSET,
    KUEUE,
    LWS,
    Controller,
    Patch,
    UnknownController,
    Webhooks,
    with_requirements,
)
from devcluster.workloads.launch import kube_controllers, resource_for
from devcluster.workloads.manifests import (
    ManifestError,
    crds,
    json_patch,
    webhook_configurations,
)

REPO = Path(__file__).resolve().parents[2]
CA = b"-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n"

WEBHOOKS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- name: mthing.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-thing}
  admissionReviewVersions: [v1]
  sideEffects: None
- name: mpod.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  admissionReviewVersions: [v1]
  sideEffects: None
"""
PATCH = """
- op: add
  path: /webhooks/1/objectSelector
  value:
    matchExpressions:
    - {key: example.com/owner, operator: Exists}
"""


def module(tmp_path: Path, patch: str = PATCH) -> Controller:
    (tmp_path / "webhook").mkdir()
    (tmp_path / "webhook" / "manifests.yaml").write_text(WEBHOOKS)
    (tmp_path / "webhook" / "patch.yaml").write_text(patch)
    return Controller(
        name="example",
        module="example.com/example",
        version="v1.0.0",
        main=".",
        crds=(),
        args=(),
        webhooks=(
            Webhooks(
                "webhook/manifests.yaml",
                patches=(Patch("webhook/patch.yaml", "MutatingWebhookConfiguration"),),
                name_prefix="example-",
            ),
        ),
    )


def test_webhooks_point_at_the_manager_on_loopback_with_the_harness_ca(tmp_path: Path) -> None:
    (config,) = webhook_configurations(module(tmp_path), tmp_path, port=9443, ca=CA)
    assert config["metadata"]["name"] == "example-mutating-webhook-configuration"
    clients = [w["clientConfig"] for w in config["webhooks"]]
    assert [c["url"] for c in clients] == [
        "https://127.0.0.1:9443/mutate-thing",
        "https://127.0.0.1:9443/mutate--v1-pod",
    ]
    assert {base64.b64decode(c["caBundle"]) for c in clients} == {CA}
    assert all("service" not in c for c in clients)
    # The module's patch narrowed the pod webhook to the controller's own pods.
    assert config["webhooks"][1]["objectSelector"]["matchExpressions"][0]["key"] == (
        "example.com/owner"
    )
    assert "objectSelector" not in config["webhooks"][0]


def test_a_patch_that_does_not_fit_names_its_file_and_path(tmp_path: Path) -> None:
    bad = "- {op: replace, path: /webhooks/0/nothingHere, value: 1}\n"
    with pytest.raises(ManifestError, match=r"webhook/patch.yaml: .*/webhooks/0/nothingHere"):
        webhook_configurations(module(tmp_path, bad), tmp_path, port=1, ca=CA)


def test_json_patch_add_replace_remove() -> None:
    document = {"a": [1, 2], "b": {"c": 1}}
    json_patch(
        document,
        [
            {"op": "add", "path": "/a/-", "value": 3},
            {"op": "add", "path": "/a/0", "value": 0},
            {"op": "replace", "path": "/b/c", "value": {"d~e/f": 2}},
            {"op": "remove", "path": "/a/1"},
        ],
    )
    assert document == {"a": [0, 2, 3], "b": {"c": {"d~e/f": 2}}}
    json_patch(document, [{"op": "remove", "path": "/b/c/d~0e~1f"}])
    assert document["b"] == {"c": {}}
    with pytest.raises(ValueError, match="unsupported JSON patch op 'move'"):
        json_patch(document, [{"op": "move", "path": "/a", "from": "/b"}])


def test_trainer_brings_jobset_first_and_each_controller_once() -> None:
    assert [c.name for c in with_requirements(["trainer", "jobset", "trainer"])] == [
        "jobset",
        "trainer",
    ]
    assert kube_controllers(["trainer", "lws"]) == ("job-controller", "statefulset-controller")


def test_an_unknown_controller_is_named_with_the_known_ones() -> None:
    with pytest.raises(UnknownController, match=r"'kuberay-operator'.*jobset, lws, trainer"):
        with_requirements(["kuberay-operator"])


def test_devcluster_up_refuses_an_unknown_controller_before_starting_anything(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "dc"
    command = ("devcluster", "up", "--workloads", "jobset,volcano", "--dir", str(directory))
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=subprocess_env(),
    )
    assert result.returncode == 1
    assert "--workloads jobset,volcano: unknown workload controller 'volcano'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not directory.exists()


@pytest.mark.parametrize("controller", [JOBSET, LWS], ids=lambda c: c.name)
def test_the_modules_pod_webhooks_only_see_their_own_pods(controller: Controller) -> None:
    """On the real module files (when built): as its kustomization would install them, the pod
    webhooks of JobSet and LWS select their own pods only, so no other pod waits on them."""
    built = build.find(controller)
    if built is None:
        pytest.skip(f"{controller.name} is not built (make controllers)")
    configs = webhook_configurations(controller, built.module, port=1, ca=CA)
    assert {c["metadata"]["name"] for c in configs} == {
        f"{controller.name}-mutating-webhook-configuration",
        f"{controller.name}-validating-webhook-configuration",
    }
    own = {"jobset": "jobset.sigs.k8s.io/jobset-name", "lws": "leaderworkerset.sigs.k8s.io/name"}
    for config in configs:
        for webhook in config["webhooks"]:
            resources = {r for rule in webhook["rules"] for r in rule["resources"]}
            if "pods" in resources:
                (selector,) = webhook["objectSelector"]["matchExpressions"]
                assert selector == {"key": own[controller.name], "operator": "Exists"}
    # And its CRDs come from the module too, each with a resource the harness can address.
    for crd in crds(controller, built.module):
        kind = crd["spec"]["names"]["kind"]
        group = crd["spec"]["group"]
        version = crd["spec"]["versions"][0]["name"]
        document = {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": {"name": "x"}}
        assert resource_for(document, [crd]).plural == crd["spec"]["names"]["plural"]


def test_every_catalog_row_names_files_its_build_copies() -> None:
    for controller in CONTROLLERS.values():
        paths = build.module_paths(controller)
        assert paths, controller.name
        assert all(not p.startswith("/") and ".." not in p for p in paths)
        if controller.config is not None:
            rendered = controller.config.format(
                kubeconfig="k",
                config="c",
                health_port=1,
                metrics_port=2,
                webhook_port=3,
                cert_dir="d",
            )
            assert yaml.safe_load(rendered)["kind"] == "Configuration"


def test_a_version_the_proxy_does_not_serve_is_named_and_nothing_is_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists():
        pytest.skip("no Go toolchain")
    monkeypatch.setenv("TOPOS_CACHE_DIR", str(tmp_path))
    missing = dataclasses.replace(JOBSET, version="v0.0.999")
    with pytest.raises(BinariesUnavailable, match=r"sigs\.k8s\.io/jobset@v0\.0\.999"):
        build.ensure(missing, log=False)
    assert build.find(missing) is None
    assert not (build.cache_dir(missing) / "jobset").exists()


def test_kueue_crds_convert_on_loopback_and_its_pod_webhooks_keep_off_kube_system() -> None:
    """On Kueue's module files (when built): the five CRDs its kustomization gives a conversion
    webhook (v1beta1 ⇄ v1beta2) get it at the manager's ``/convert`` on loopback with the harness
    CA, the others none; its kustomization's inline patches keep the pod, Deployment and
    StatefulSet webhooks off ``kube-system`` and ``kueue-system``."""
    built = build.find(KUEUE)
    if built is None:
        pytest.skip("kueue is not built (make controllers)")
    definitions = crds(KUEUE, built.module, port=9443, ca=CA)
    converting = {
        d["metadata"]["name"]: d["spec"]["conversion"]
        for d in definitions
        if (d["spec"].get("conversion") or {}).get("strategy") == "Webhook"
    }
    assert sorted(converting) == [
        f"{plural}.kueue.x-k8s.io"
        for plural in ("clusterqueues", "cohorts", "localqueues", "multikueueclusters", "workloads")
    ]
    for conversion in converting.values():
        client = conversion["webhook"]["clientConfig"]
        assert client["url"] == "https://127.0.0.1:9443/convert"
        assert base64.b64decode(client["caBundle"]) == CA
        assert conversion["webhook"]["conversionReviewVersions"] == ["v1"]
    storage = {
        d["metadata"]["name"]: [v["name"] for v in d["spec"]["versions"] if v.get("storage")]
        for d in definitions
    }
    assert storage["workloads.kueue.x-k8s.io"] == ["v1beta2"]
    # Without a port and CA (reading only), the module's CRDs as they are.
    assert all("conversion" not in d["spec"] for d in crds(KUEUE, built.module))
    configs = webhook_configurations(KUEUE, built.module, port=9443, ca=CA)
    selectors = {w["name"]: w.get("namespaceSelector") for c in configs for w in c["webhooks"]}
    for name in ("mpod.kb.io", "vpod.kb.io", "mdeployment.kb.io", "vstatefulset.kb.io"):
        (expression,) = selectors[name]["matchExpressions"]
        assert expression["operator"] == "NotIn", name
        assert set(expression["values"]) == {"kube-system", "kueue-system"}, name
    assert selectors["mjob.kb.io"] is None


def test_an_inline_patch_naming_a_webhook_the_module_lacks_is_named(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        "patches:\n- patch: |-\n"
        "    apiVersion: admissionregistration.k8s.io/v1\n"
        "    kind: MutatingWebhookConfiguration\n"
        "    metadata: {name: mutating-webhook-configuration}\n"
        "    webhooks: [{name: mnothing.kb.io, namespaceSelector: {}}]\n"
    )
    controller = dataclasses.replace(
        module(tmp_path),
        webhooks=(Webhooks("webhook/manifests.yaml", kustomization="kustomization.yaml"),),
    )
    with pytest.raises(ManifestError, match=r"names webhook 'mnothing.kb.io'"):
        webhook_configurations(controller, tmp_path, port=1, ca=CA)


def test_a_conversion_patch_for_no_crd_of_the_controller_is_named(tmp_path: Path) -> None:
    (tmp_path / "crd").mkdir()
    (tmp_path / "crd" / "things.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "metadata: {name: things.example.com}\nspec: {group: example.com}\n"
    )
    (tmp_path / "webhook_in_others.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "metadata: {name: others.example.com}\n"
        "spec: {conversion: {strategy: Webhook, webhook: {clientConfig: {}}}}\n"
    )
    controller = dataclasses.replace(
        module(tmp_path), crds=("crd",), conversion=("webhook_in_others.yaml",)
    )
    with pytest.raises(ManifestError, match=r"webhook_in_others.yaml: .*'others.example.com'"):
        crds(controller, tmp_path, port=1, ca=CA)
