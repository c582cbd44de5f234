"""The workload controllers the harness builds and runs, one row each: where the code is (Go
module, exact version, main package), what it installs from that module (CRDs, webhook
configurations with their kustomize patches, objects such as Trainer's runtimes), and how it is
started (command-line template, configuration-file template).

Adding a controller is adding a row. Paths are relative to the module's root;
templates name the values the harness fills in (``str.format``):

- ``{kubeconfig}``: a kubeconfig of the control plane for this controller;
- ``{config}``: the path of the rendered ``config`` template;
- ``{health_port}``, ``{metrics_port}``, ``{webhook_port}``: free 127.0.0.1 ports;
- ``{cert_dir}``: a directory with ``tls.crt`` / ``tls.key`` (issued for 127.0.0.1 by the
  controller's own CA, whose certificate is ``ca.crt`` there and every webhook's ``caBundle``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final


@dataclass(frozen=True, slots=True)
class Patch:
    """A JSON (RFC 6902) patch file the module's kustomization applies to the documents of
    ``kind`` (and ``name``, when given) in a webhook manifest."""

    path: str
    kind: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Webhooks:
    """A file of Mutating/ValidatingWebhookConfigurations, its patches, and the ``namePrefix``
    its kustomization gives them (so two controllers' ``mutating-webhook-configuration`` do not
    collide)."""

    path: str
    patches: tuple[Patch, ...] = ()
    name_prefix: str = ""
    kustomization: str | None = None
    """A kustomization whose inline ``patch:`` entries (strategic-merge patches of webhooks by
    name, e.g. Kueue's namespaceSelectors keeping its pod webhook off ``kube-system``) apply."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CertSecret:
    """For a controller that always rotates its own webhook certificate (no switch to turn that
    off): the Secret it reads on start. The harness writes its CA and serving certificate there
    first, valid for what the rotator checks (``ca_name`` on the CA, ``dns_name`` on the serving
    certificate, the CA key RSA in PKCS #1), so the rotator keeps them and injects the same CA
    the harness wrote.
    ``mounted_check``: the file the rotator waits for, as a kubelet would have mounted the
    Secret there (it only checks that the file exists)."""

    namespace: str
    name: str
    ca_name: str
    dns_name: str
    mounted_check: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Controller:
    name: str
    module: str
    version: str
    main: str
    """The main package, relative to the module root (``.``, ``./cmd``)."""
    crds: tuple[str, ...]
    """Directories (every ``*.yaml``) or files of CustomResourceDefinitions."""
    args: tuple[str, ...]
    """Command-line template (after the binary)."""
    config: str | None = None
    """Configuration-file template, written to ``{config}``."""
    webhooks: tuple[Webhooks, ...] = ()
    objects: tuple[str, ...] = ()
    """Files of other objects installed once the controller is ready (its webhooks vet them)."""
    requires: tuple[str, ...] = ()
    """Controllers that must run too (started first)."""
    kube_controllers: tuple[str, ...] = ()
    """kube-controller-manager controllers it needs (its children are Jobs, StatefulSets)."""
    version_variable: str | None = None
    """A Go string variable stamped with the version (``-X``)."""
    cert_secret: CertSecret | None = None
    namespaces: tuple[str, ...] = field(default=())
    """Namespaces created before it starts."""
    mounted_certs: tuple[str, ...] = ()
    """Fixed directories where the controller reads a serving certificate (``tls.crt``,
    ``tls.key``) that a kubelet would have mounted from a Secret: the harness writes its own
    there unless one is present (what it serves from there nothing here verifies)."""
    conversion: tuple[str, ...] = ()
    """The module's patches that give a CRD a conversion webhook (``spec.conversion``, the
    kubebuilder ``webhook_in_*.yaml``): applied with the webhook pointed at loopback."""

    @property
    def module_version(self) -> str:
        return f"{self.module}@{self.version}"


JOBSET: Final = Controller(
    name="jobset",
    module="sigs.k8s.io/jobset",
    version="v0.10.1",
    main=".",
    crds=("config/components/crd/bases",),
    webhooks=(
        Webhooks(
            "config/components/webhook/manifests.yaml",
            patches=(
                Patch(
                    "config/components/webhook/patches/mutating-patch.yaml",
                    "MutatingWebhookConfiguration",
                ),
                Patch(
                    "config/components/webhook/patches/validating-patch.yaml",
                    "ValidatingWebhookConfiguration",
                ),
            ),
            name_prefix="jobset-",
        ),
    ),
    kube_controllers=("job-controller",),
    version_variable="sigs.k8s.io/jobset/pkg/version.GitVersion",
    config="""\
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: {webhook_port}
  certDir: {cert_dir}
metrics:
  bindAddress: 127.0.0.1:{metrics_port}
  certDir: {cert_dir}
health:
  healthProbeBindAddress: 127.0.0.1:{health_port}
""",
    args=("--kubeconfig={kubeconfig}", "--config={config}", "--zap-log-level=info"),
)

LWS: Final = Controller(
    name="lws",
    module="sigs.k8s.io/lws",
    version="v0.7.0",
    main="./cmd",
    crds=("config/crd/bases",),
    webhooks=(
        Webhooks(
            "config/webhook/manifests.yaml",
            patches=(
                Patch("config/webhook/mutating-patch.yaml", "MutatingWebhookConfiguration"),
                Patch("config/webhook/validating-patch.yaml", "ValidatingWebhookConfiguration"),
            ),
            name_prefix="lws-",
        ),
    ),
    kube_controllers=("statefulset-controller",),
    version_variable="sigs.k8s.io/lws/pkg/version.GitVersion",
    config="""\
apiVersion: config.lws.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: {webhook_port}
  certDir: {cert_dir}
metrics:
  bindAddress: 127.0.0.1:{metrics_port}
health:
  healthProbeBindAddress: 127.0.0.1:{health_port}
""",
    args=("--kubeconfig={kubeconfig}", "--config={config}", "--zap-log-level=info"),
)

TRAINER: Final = Controller(
    name="trainer",
    module="github.com/kubeflow/trainer/v2",
    version="v2.0.0",
    main="./cmd/trainer-controller-manager",
    crds=("manifests/base/crds",),
    webhooks=(
        Webhooks(
            "manifests/base/webhook/manifests.yaml",
            patches=(Patch("manifests/base/webhook/patch.yaml", "ValidatingWebhookConfiguration"),),
        ),
    ),
    objects=("manifests/base/runtimes/torch_distributed.yaml",),
    requires=("jobset",),
    # Trainer v2.0.0 always runs cert-controller's rotator (pkg/util/cert): no flag turns it off.
    cert_secret=CertSecret(
        namespace="kubeflow-system",
        name="kubeflow-trainer-webhook-cert",
        ca_name="kubeflow-trainer-ca",
        dns_name="kubeflow-trainer-controller-manager.kubeflow-system.svc",
        mounted_check="/tmp/k8s-webhook-server/serving-certs/tls.crt",
    ),
    namespaces=("kubeflow-system",),
    args=(
        "--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--health-probe-bind-address=127.0.0.1:{health_port}",
        "--metrics-bind-address=127.0.0.1:{metrics_port}",
        "--webhook-server-port={webhook_port}",
        "--zap-log-level=info",
    ),
)

KUBERAY: Final = Controller(
    name="kuberay",
    module="github.com/ray-project/kuberay/ray-operator",
    version="v1.5.0",
    main=".",
    crds=("config/crd/bases",),
    args=(
        "--kubeconfig={kubeconfig}",
        "--enable-leader-election=false",
        "--health-probe-bind-address=127.0.0.1:{health_port}",
        "--metrics-addr=127.0.0.1:{metrics_port}",
        "--log-stdout-encoder=console",
    ),
)

# Kueue's integrations are those whose controllers run beside it in the harness (Job: the
# kube-controller-manager's; JobSet and LWS: started with it).
KUEUE: Final = Controller(
    name="kueue",
    module="sigs.k8s.io/kueue",
    version="v0.17.0",
    main="./cmd/kueue",
    crds=("config/components/crd/bases",),
    conversion=tuple(
        f"config/components/crd/patches/webhook_in_{kind}.yaml"
        for kind in ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
    ),
    webhooks=(
        Webhooks(
            "config/components/webhook/manifests.yaml",
            kustomization="config/components/webhook/kustomization.yaml",
        ),
    ),
    requires=("jobset", "lws"),
    kube_controllers=("job-controller",),
    version_variable="sigs.k8s.io/kueue/pkg/version.GitVersion",
    namespaces=("kueue-system",),
    # With internalCertManagement off, its metrics server always reads these (cmd/kueue).
    mounted_certs=("/etc/kueue/metrics/certs",),
    config="""\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
manageJobsWithoutQueueName: false
fairSharing:
  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
webhook:
  host: 127.0.0.1
  port: {webhook_port}
  certDir: {cert_dir}
metrics:
  bindAddress: 127.0.0.1:{metrics_port}
health:
  healthProbeBindAddress: 127.0.0.1:{health_port}
integrations:
  frameworks:
  - batch/job
  - pod
  - jobset.x-k8s.io/jobset
  - leaderworkerset.x-k8s.io/leaderworkerset
""",
    # The visibility API server (an aggregated API) is not installed: off.
    args=(
        "--kubeconfig={kubeconfig}",
        "--config={config}",
        "--feature-gates=VisibilityOnDemand=false",
        "--zap-log-level=2",
    ),
)

CONTROLLERS: Final[dict[str, Controller]] = {
    c.name: c for c in (JOBSET, LWS, TRAINER, KUBERAY, KUEUE)
}
#: The workload controllers proper (``--workloads`` without names); Kueue, which admits the
#: others' workloads and watches every pod with a queue name, is asked for by name (``--kueue``).
WORKLOAD_CONTROLLERS: Final = tuple(name for name in CONTROLLERS if name != KUEUE.name)


class UnknownController(ValueError):
    """A controller name not in the catalog."""


def lookup(name: str) -> Controller:
    try:
        return CONTROLLERS[name]
    except KeyError:
        raise UnknownController(
            f"unknown workload controller {name!r}; known: {', '.join(CONTROLLERS)}"
        ) from None


def with_requirements(names: tuple[str, ...] | list[str]) -> tuple[Controller, ...]:
    """The controllers ``names`` and those they require, each once, requirements first."""
    ordered: list[Controller] = []

    def visit(name: str) -> None:
        controller = lookup(name)
        for required in controller.requires:
            visit(required)
        if controller not in ordered:
            ordered.append(controller)

    for name in names:
        visit(name)
    return tuple(ordered)
