"""deploy/: the kustomize base renders, every object in it is accepted by the real API server
(server-side dry run, after the CRD and namespace are installed for real), and the pieces an
operator relies on hold: two coordinators with probes, non-root read-only containers, a Service
that reaches only the leader over TLS from a Secret, a disruption budget, a ConfigMap the
coordinator's own loaders accept, and a PodGroup CRD that validates what users write.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from coordinator.app.config.load import parse_config
from coordinator.core.registry import weights_of
from tests.support.deploy import (
    DEPLOY,
    NAMESPACE,
    Kubectl,
    apply_for_real,
    render,
    wait_crd_established,
)

CRD = "podgroups.scheduling.x-k8s.io"


def _by_kind(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}"
    return found[0]


@pytest.fixture(scope="module")
def installed(kubectl: Kubectl) -> Kubectl:
    apply_for_real(kubectl, "crds/podgroups.scheduling.x-k8s.io.yaml", "namespace.yaml")
    wait_crd_established(kubectl, CRD)
    return kubectl


def test_every_manifest_passes_server_side_dry_run(installed: Kubectl) -> None:
    done = installed("apply", "--dry-run=server", "-k", str(DEPLOY))
    assert done.returncode == 0, done.stderr
    for expected in (
        "namespace/topos-system",
        f"customresourcedefinition.apiextensions.k8s.io/{CRD}",
        "serviceaccount/topos-coordinator",
        "serviceaccount/topos-agent",
        "clusterrole.rbac.authorization.k8s.io/topos-coordinator",
        "role.rbac.authorization.k8s.io/topos-coordinator-leader-election",
        "role.rbac.authorization.k8s.io/topos-viewer",
        "configmap/topos-coordinator-config",
        "service/topos-coordinator",
        "deployment.apps/topos-coordinator",
        "poddisruptionbudget.policy/topos-coordinator",
        "daemonset.apps/topos-agent",
        "validatingadmissionpolicy.admissionregistration.k8s.io/topos-agent-own-node",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/topos-agent-own-node",
    ):
        assert expected in done.stdout, f"{expected} missing from:\n{done.stdout}"


def test_dry_run_catches_a_broken_manifest(installed: Kubectl, tmp_path: Any) -> None:
    """The dry run is a real check: an invalid Deployment is refused."""
    objects = render(installed)
    deployment = _by_kind(objects, "Deployment", "topos-coordinator")
    deployment["spec"]["replicas"] = -1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(deployment))
    done = installed("apply", "--dry-run=server", "-f", str(bad))
    assert done.returncode != 0
    assert "spec.replicas" in done.stderr


def test_podgroup_crd_validates_what_users_write(installed: Kubectl, tmp_path: Any) -> None:
    good = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train-1", "namespace": NAMESPACE},
        "spec": {
            "minMember": 8,
            "scheduleTimeoutSeconds": 300,
            "minResources": {"nvidia.com/gpu": 64, "cpu": "500m", "memory": "1Ti"},
        },
    }
    path = tmp_path / "pg.yaml"
    path.write_text(yaml.safe_dump(good))
    done = installed("apply", "--dry-run=server", "-f", str(path))
    assert done.returncode == 0, done.stderr
    assert "podgroup.scheduling.x-k8s.io/train-1" in done.stdout

    for spec, field in (
        ({"minMember": 0}, "spec.minMember"),
        ({"minMember": "eight"}, "spec.minMember"),
        ({"minMember": 2, "scheduleTimeoutSeconds": -5}, "spec.scheduleTimeoutSeconds"),
        ({"minMember": 2, "minResources": {"cpu": "lots"}}, "spec.minResources"),
    ):
        bad = dict(good, spec=spec)
        path.write_text(yaml.safe_dump(bad))
        done = installed("apply", "--dry-run=server", "-f", str(path))
        assert done.returncode != 0, f"{spec} was accepted"
        assert field in done.stderr


def test_coordinator_deployment_is_ha_probed_and_locked_down(kubectl: Kubectl) -> None:
    objects = render(kubectl)
    deployment = _by_kind(objects, "Deployment", "topos-coordinator")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "topos-coordinator"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"]["path"] == path
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]["memory"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "topos-coordinator-tls"
    assert volumes["config"]["configMap"]["name"] == "topos-coordinator-config"


def test_service_reaches_only_the_leader_and_the_budget_keeps_one(kubectl: Kubectl) -> None:
    objects = render(kubectl)
    service = _by_kind(objects, "Service", "topos-coordinator")
    assert service["spec"]["selector"]["topos.io/leader"] == "true"
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (443, "https")
    pdb = _by_kind(objects, "PodDisruptionBudget", "topos-coordinator")
    assert pdb["spec"]["minAvailable"] == 1
    deployment = _by_kind(objects, "Deployment", "topos-coordinator")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = pdb["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()


def test_configmap_is_accepted_by_the_coordinators_loader(kubectl: Kubectl) -> None:
    objects = render(kubectl)
    config = parse_config(
        yaml.safe_load(
            _by_kind(objects, "ConfigMap", "topos-coordinator-config")["data"]["config.yaml"]
        )
    )
    assert config.auth is not None
    assert config.auth.enabled
    assert config.auth.agent_service_accounts == ("topos-system/topos-agent",)
    assert config.leader_election is not None
    assert config.leader_election.namespace == NAMESPACE
    assert weights_of(config.scheduling)["GpuTopology"] == 5
    assert config.coordinator.address == ("0.0.0.0", 8443)


def test_namespace_file_matches_the_objects(kubectl: Kubectl) -> None:
    objects = render(kubectl)
    namespaced = [o for o in objects if "namespace" in o["metadata"]]
    assert {o["metadata"]["namespace"] for o in namespaced} == {NAMESPACE}
    assert (DEPLOY / "namespace.yaml").is_file()
