"""Least privilege, proved on the real API server: each ServiceAccount of deploy/ is impersonated
(``kubectl auth can-i --as=…``) and must be able to do exactly what its component does — and no
more. Two kinds of proof:

* a table of verbs that must be allowed and verbs that must be refused (secrets, node writes,
  deleting pods, other namespaces' leases …);
* the complete list of what the identity may do (``can-i --list``, a SelfSubjectRulesReview)
  minus what every authenticated identity may do, compared with the exact expected grants, so a
  rule added to the manifests without a reason fails here.

``topos-viewer`` (for ``kubectl topos``) is checked through the real service proxy too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devcluster.controlplane import ControlPlane
from tests.support.deploy import NAMESPACE, Kubectl, apply_for_real, wait_crd_established

COORDINATOR = f"system:serviceaccount:{NAMESPACE}:topos-coordinator"
AGENT = f"system:serviceaccount:{NAMESPACE}:topos-agent"
NOBODY = f"system:serviceaccount:{NAMESPACE}:nobody"
_ROW = re.compile(r"^\s*(\S+)?\s*\[([^\]]*)\]\s+\[([^\]]*)\]\s+\[([^\]]*)\]\s*$")


@pytest.fixture(scope="module")
def rbac(kubectl: Kubectl) -> Kubectl:
    apply_for_real(kubectl, "crds/podgroups.scheduling.x-k8s.io.yaml")
    wait_crd_established(kubectl, "podgroups.scheduling.x-k8s.io")  # can-i resolves its name
    apply_for_real(
        kubectl,
        "namespace.yaml",
        "coordinator-rbac.yaml",
        "agent-rbac.yaml",
        "viewer-rbac.yaml",
    )
    return kubectl


def can_i(kubectl: Kubectl, user: str, verb: str, resource: str, *flags: str) -> bool:
    done = kubectl("auth", "can-i", verb, resource, f"--as={user}", *flags)
    answer = done.stdout.strip()
    assert answer in ("yes", "no"), done.stderr
    return answer == "yes"


def grants(kubectl: Kubectl, user: str, namespace: str) -> set[tuple[str, str, str]]:
    """Every (resource, resourceNames, verb) ``user`` holds in ``namespace`` (cluster-wide
    grants included); non-resource URLs are left out."""
    done = kubectl("auth", "can-i", "--list", "-n", namespace, f"--as={user}")
    assert done.returncode == 0, done.stderr
    out: set[tuple[str, str, str]] = set()
    for line in done.stdout.splitlines()[1:]:
        match = _ROW.match(line)
        assert match, f"unparsed line: {line!r}"
        resource, _urls, names, verbs = match.groups()
        if resource:
            out |= {(resource, names, verb) for verb in verbs.split()}
    return out


def _expand(rules: dict[str, list[str]]) -> set[tuple[str, str, str]]:
    out = set()
    for key, verbs in rules.items():
        resource, _, names = key.partition("@")
        out |= {(resource, names, verb) for verb in verbs}
    return out


COORDINATOR_GRANTS = _expand(
    {
        "pods": ["get", "list", "watch", "patch"],
        "pods/status": ["patch"],
        "pods/binding": ["create"],
        "pods/eviction": ["create"],
        "nodes": ["get", "list", "watch"],
        "namespaces": ["list", "watch"],
        "events": ["create", "patch"],
        "services": ["list", "watch"],
        "replicationcontrollers": ["list", "watch"],
        "jobs.batch": ["get", "list", "watch"],
        "replicasets.apps": ["get", "list", "watch"],
        "deployments.apps": ["get", "list", "watch"],
        "statefulsets.apps": ["get", "list", "watch"],
        "jobsets.jobset.x-k8s.io": ["list", "watch"],
        "leaderworkersets.leaderworkerset.x-k8s.io": ["list", "watch"],
        "rayclusters.ray.io": ["list", "watch"],
        "tokenreviews.authentication.k8s.io": ["create"],
        "podgroups.scheduling.x-k8s.io": ["get", "list", "watch"],
        "podgroups.scheduling.x-k8s.io/status": ["update", "patch"],
        "podgroups.scheduling.k8s.io": ["get", "list", "watch"],
        "podgroups.scheduling.k8s.io/status": ["patch"],
        "podgroups.scheduling.volcano.sh": ["get", "list", "watch", "patch"],
        "podgroups.scheduling.run.ai": ["get", "list", "watch"],
        "podgroups.scheduling.run.ai/status": ["patch"],
        "hypernodes.topology.volcano.sh": ["list", "watch"],
        "topologies.kueue.x-k8s.io": ["list", "watch"],
        "topologies.kai.scheduler": ["list", "watch"],
        "computedomains.resource.nvidia.com": ["list", "watch"],
        "poddisruptionbudgets.policy": ["list", "watch"],
        "priorityclasses.scheduling.k8s.io": ["list"],
        "resourceslices.resource.k8s.io": ["get", "list", "watch"],
        "deviceclasses.resource.k8s.io": ["get", "list", "watch"],
        "devicetaintrules.resource.k8s.io": ["get", "list", "watch", "create", "update", "delete"],
        "resourceclaims.resource.k8s.io": ["get", "list", "watch", "create", "patch", "delete"],
        "resourceclaims.resource.k8s.io/status": ["update", "patch"],
        "persistentvolumeclaims": ["get", "list", "watch", "patch"],
        "persistentvolumes": ["get", "list", "watch", "patch"],
        "storageclasses.storage.k8s.io": ["list", "watch"],
        "csinodes.storage.k8s.io": ["list", "watch"],
        "volumeattachments.storage.k8s.io": ["list", "watch"],
    }
)
COORDINATOR_NAMESPACE_GRANTS = _expand(
    {
        "leases.coordination.k8s.io": ["create"],
        "leases.coordination.k8s.io@topos-coordinator": ["get", "update"],
    }
)
AGENT_GRANTS = _expand({"nodes": ["get", "patch"], "nodes/status": ["patch"]})


def test_coordinator_holds_exactly_its_grants(rbac: Kubectl) -> None:
    baseline = grants(rbac, NOBODY, NAMESPACE)
    assert baseline, "every authenticated identity can at least review itself"
    assert grants(rbac, COORDINATOR, NAMESPACE) - baseline == (
        COORDINATOR_GRANTS | COORDINATOR_NAMESPACE_GRANTS
    )
    # elsewhere, no leases
    assert grants(rbac, COORDINATOR, "default") - baseline == COORDINATOR_GRANTS


def test_agent_holds_exactly_its_grants(rbac: Kubectl) -> None:
    baseline = grants(rbac, NOBODY, NAMESPACE)
    for namespace in (NAMESPACE, "default", "kube-system"):
        assert grants(rbac, AGENT, namespace) - baseline == AGENT_GRANTS


# (identity, verb, resource, extra flags, allowed)
TABLE: list[tuple[str, str, str, tuple[str, ...], bool]] = [
    # --- the coordinator: what it does
    (COORDINATOR, "watch", "pods", ("-A",), True),
    (COORDINATOR, "list", "pods", ("-n", "team-a"), True),
    (COORDINATOR, "patch", "pods", ("-n", "team-a"), True),
    (COORDINATOR, "patch", "pods", ("-n", "team-a", "--subresource=status"), True),
    (COORDINATOR, "create", "pods", ("-n", "team-a", "--subresource=binding"), True),
    (COORDINATOR, "create", "pods", ("-n", "team-a", "--subresource=eviction"), True),
    (COORDINATOR, "create", "events", ("-n", "team-a"), True),
    (COORDINATOR, "patch", "events", ("-n", "team-a"), True),
    (COORDINATOR, "get", "nodes", (), True),
    (COORDINATOR, "watch", "jobs.batch", ("-A",), True),
    (COORDINATOR, "watch", "replicasets.apps", ("-A",), True),
    (COORDINATOR, "list", "deployments.apps", ("-n", "team-a"), True),
    (COORDINATOR, "watch", "statefulsets.apps", ("-A",), True),
    (COORDINATOR, "patch", "deployments.apps", ("-n", "team-a"), False),
    (COORDINATOR, "create", "jobs.batch", ("-n", "team-a"), False),
    (COORDINATOR, "watch", "nodes", (), True),
    (COORDINATOR, "watch", "namespaces", (), True),
    (COORDINATOR, "create", "tokenreviews.authentication.k8s.io", (), True),
    (COORDINATOR, "watch", "podgroups.scheduling.x-k8s.io", ("-A",), True),
    (
        COORDINATOR,
        "update",
        "podgroups.scheduling.x-k8s.io",
        ("-n", "ml", "--subresource=status"),
        True,
    ),
    (COORDINATOR, "watch", "podgroups.scheduling.k8s.io", ("-A",), True),
    (
        COORDINATOR,
        "patch",
        "podgroups.scheduling.k8s.io",
        ("-n", "ml", "--subresource=status"),
        True,
    ),
    (COORDINATOR, "list", "poddisruptionbudgets.policy", ("-A",), True),
    (COORDINATOR, "list", "priorityclasses.scheduling.k8s.io", (), True),
    (COORDINATOR, "watch", "resourceslices.resource.k8s.io", (), True),
    (COORDINATOR, "watch", "deviceclasses.resource.k8s.io", (), True),
    (COORDINATOR, "watch", "devicetaintrules.resource.k8s.io", (), True),
    (COORDINATOR, "create", "devicetaintrules.resource.k8s.io", (), True),
    (COORDINATOR, "update", "devicetaintrules.resource.k8s.io", (), True),
    (COORDINATOR, "delete", "devicetaintrules.resource.k8s.io", (), True),
    (COORDINATOR, "patch", "devicetaintrules.resource.k8s.io", (), False),
    (COORDINATOR, "watch", "resourceclaims.resource.k8s.io", ("-A",), True),
    (COORDINATOR, "create", "resourceclaims.resource.k8s.io", ("-n", "ml"), True),
    (
        COORDINATOR,
        "update",
        "resourceclaims.resource.k8s.io",
        ("-n", "ml", "--subresource=status"),
        True,
    ),
    (COORDINATOR, "create", "leases.coordination.k8s.io", ("-n", NAMESPACE), True),
    (
        COORDINATOR,
        "update",
        "leases.coordination.k8s.io/topos-coordinator",
        ("-n", NAMESPACE),
        True,
    ),
    # --- the coordinator: what it must not do
    (COORDINATOR, "get", "secrets", ("-n", NAMESPACE), False),
    (COORDINATOR, "list", "secrets", ("-A",), False),
    (COORDINATOR, "get", "configmaps", ("-n", NAMESPACE), False),
    (COORDINATOR, "patch", "nodes", (), False),
    (COORDINATOR, "update", "nodes", ("--subresource=status",), False),
    (COORDINATOR, "delete", "nodes", (), False),
    (COORDINATOR, "patch", "namespaces", (), False),
    (COORDINATOR, "delete", "namespaces", (), False),
    (COORDINATOR, "delete", "pods", ("-n", "team-a"), False),
    (COORDINATOR, "create", "pods", ("-n", "team-a"), False),
    (COORDINATOR, "update", "pods", ("-n", "team-a"), False),
    (COORDINATOR, "create", "pods", ("-n", "team-a", "--subresource=exec"), False),
    (COORDINATOR, "delete", "events", ("-n", "team-a"), False),
    (COORDINATOR, "update", "podgroups.scheduling.x-k8s.io", ("-n", "ml"), False),
    (COORDINATOR, "delete", "podgroups.scheduling.x-k8s.io", ("-n", "ml"), False),
    (COORDINATOR, "update", "podgroups.scheduling.k8s.io", ("-n", "ml"), False),
    (COORDINATOR, "create", "workloads.scheduling.k8s.io", ("-n", "ml"), False),
    (COORDINATOR, "create", "resourceslices.resource.k8s.io", (), False),
    (COORDINATOR, "delete", "deviceclasses.resource.k8s.io", (), False),
    (COORDINATOR, "update", "resourceclaims.resource.k8s.io", ("-n", "ml"), False),
    (COORDINATOR, "watch", "priorityclasses.scheduling.k8s.io", (), False),
    (COORDINATOR, "create", "poddisruptionbudgets.policy", ("-n", "team-a"), False),
    (
        COORDINATOR,
        "update",
        "leases.coordination.k8s.io/topos-coordinator",
        ("-n", "default"),
        False,
    ),
    (
        COORDINATOR,
        "update",
        "leases.coordination.k8s.io/kube-scheduler",
        ("-n", "kube-system"),
        False,
    ),
    (COORDINATOR, "get", "leases.coordination.k8s.io/someone-else", ("-n", NAMESPACE), False),
    (
        COORDINATOR,
        "delete",
        "leases.coordination.k8s.io/topos-coordinator",
        ("-n", NAMESPACE),
        False,
    ),
    (COORDINATOR, "create", "serviceaccounts", ("-n", NAMESPACE, "--subresource=token"), False),
    (COORDINATOR, "create", "clusterrolebindings", (), False),
    (COORDINATOR, "impersonate", "users", (), False),
    (COORDINATOR, "create", "customresourcedefinitions.apiextensions.k8s.io", (), False),
    # --- the agent: what it does, and nothing else
    (AGENT, "get", "nodes", (), True),
    (AGENT, "patch", "nodes", (), True),
    (AGENT, "list", "nodes", (), False),
    (AGENT, "delete", "nodes", (), False),
    # its ToposGPUHealthy condition (the admission policy keeps it to that condition)
    (AGENT, "patch", "nodes", ("--subresource=status",), True),
    (AGENT, "get", "secrets", ("-n", NAMESPACE), False),
    (AGENT, "get", "secrets", ("-n", "kube-system"), False),
    (AGENT, "list", "secrets", ("-A",), False),
    (AGENT, "create", "pods", ("-n", "team-a", "--subresource=binding"), False),
    (AGENT, "list", "pods", ("-A",), False),
    (AGENT, "create", "tokenreviews.authentication.k8s.io", (), False),
    (AGENT, "create", "leases.coordination.k8s.io", ("-n", NAMESPACE), False),
]


@pytest.mark.parametrize(
    ("user", "verb", "resource", "flags", "allowed"),
    TABLE,
    ids=[
        f"{u.rsplit(':', 1)[1]}-{'may' if a else 'may-not'}-{v}-{r}{''.join(f)}"
        for u, v, r, f, a in TABLE
    ],
)
def test_can_i(
    rbac: Kubectl, user: str, verb: str, resource: str, flags: tuple[str, ...], allowed: bool
) -> None:
    assert can_i(rbac, user, verb, resource, *flags) is allowed


@pytest.fixture
def alice(rbac: Kubectl, control_plane: ControlPlane, tmp_path: Path) -> Path:
    """A user bound to topos-viewer, with a kubeconfig of her own."""
    done = rbac(
        "create",
        "rolebinding",
        "alice-topos",
        "--role=topos-viewer",
        "--user=alice",
        "-n",
        NAMESPACE,
    )
    assert done.returncode == 0 or "AlreadyExists" in done.stderr, done.stderr
    return control_plane.write_user_kubeconfig(tmp_path / "alice.kubeconfig", user="alice")


def test_viewer_may_use_the_coordinators_proxy_and_nothing_else(rbac: Kubectl, alice: Path) -> None:
    service = "services/https:topos-coordinator:443"
    assert can_i(rbac, "alice", "get", service, "--subresource=proxy", "-n", NAMESPACE)
    assert not can_i(rbac, "alice", "create", service, "--subresource=proxy", "-n", NAMESPACE)
    assert not can_i(
        rbac, "alice", "get", "services/https:other:443", "--subresource=proxy", "-n", NAMESPACE
    )
    assert not can_i(rbac, "alice", "get", service, "--subresource=proxy", "-n", "default")
    assert not can_i(rbac, "alice", "get", "services", "-n", NAMESPACE)
    assert not can_i(rbac, "bob", "get", service, "--subresource=proxy", "-n", NAMESPACE)

    # Through the real proxy: alice passes authorization (the Service is absent here, so the
    # API server answers 404/503, never 403); bob is refused with 403.
    path = f"/api/v1/namespaces/{NAMESPACE}/services/https:topos-coordinator:443/proxy/v1/nodes"
    as_alice = rbac("--kubeconfig", str(alice), "get", "--raw", path)
    assert as_alice.returncode != 0
    assert "forbidden" not in as_alice.stderr.lower(), as_alice.stderr
    as_bob = rbac("get", "--raw", path, "--as=bob")
    assert "forbidden" in as_bob.stderr.lower(), as_bob.stderr
