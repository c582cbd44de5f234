"""The resource types Topos touches, as (group, version, plural) with the URL they live at."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource type. ``group`` is ``""`` for the core group (``/api/v1``)."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The request path, e.g. ``/api/v1/namespaces/ns/pods/p/binding``."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [base]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{_segment(namespace)}")
        elif not self.namespaced and namespace is not None:
            raise ValueError(f"{self.plural} are cluster-scoped; no namespace expected")
        parts.append(self.plural)
        if name is not None:
            parts.append(_segment(name))
            if subresource is not None:
                parts.append(subresource)
        elif subresource is not None:
            raise ValueError("a subresource needs an object name")
        return "/".join(parts)


def _segment(value: str) -> str:
    if not value or "/" in value or value in {".", ".."}:
        raise ValueError(f"invalid name or namespace in an API path: {value!r}")
    return quote(value, safe="")


NAMESPACES = Resource("", "v1", "namespaces", namespaced=False, kind="Namespace")
NODES = Resource("", "v1", "nodes", namespaced=False, kind="Node")
PODS = Resource("", "v1", "pods", namespaced=True, kind="Pod")
EVENTS = Resource("", "v1", "events", namespaced=True, kind="Event")
CONFIG_MAPS = Resource("", "v1", "configmaps", namespaced=True, kind="ConfigMap")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", namespaced=True, kind="ServiceAccount")
LEASES = Resource("coordination.k8s.io", "v1", "leases", namespaced=True, kind="Lease")
TOKEN_REVIEWS = Resource(
    "authentication.k8s.io", "v1", "tokenreviews", namespaced=False, kind="TokenReview"
)
CLUSTER_ROLES = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False, kind="ClusterRole"
)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io",
    "v1",
    "clusterrolebindings",
    namespaced=False,
    kind="ClusterRoleBinding",
)
POD_GROUPS = Resource(  # scheduler-plugins' coscheduling CRD (an accepted gang alias)
    "scheduling.x-k8s.io", "v1alpha1", "podgroups", namespaced=True, kind="PodGroup"
)
# Dynamic Resource Allocation (resource.k8s.io/v1, GA since 1.34).
RESOURCE_SLICES = Resource(
    "resource.k8s.io", "v1", "resourceslices", namespaced=False, kind="ResourceSlice"
)
DEVICE_CLASSES = Resource(
    "resource.k8s.io", "v1", "deviceclasses", namespaced=False, kind="DeviceClass"
)
RESOURCE_CLAIMS = Resource(
    "resource.k8s.io", "v1", "resourceclaims", namespaced=True, kind="ResourceClaim"
)
# KEP-5055: beta in 1.36, served only with the DRADeviceTaintRules gate and its runtime-config.
DEVICE_TAINT_RULES = Resource(
    "resource.k8s.io", "v1beta2", "devicetaintrules", namespaced=False, kind="DeviceTaintRule"
)
# NVIDIA's DRA driver for GPUs: multi-node NVLink (IMEX) domains; served only where it is installed.
COMPUTE_DOMAINS = Resource(
    "resource.nvidia.com", "v1beta1", "computedomains", namespaced=True, kind="ComputeDomain"
)
RESOURCE_CLAIM_TEMPLATES = Resource(
    "resource.k8s.io",
    "v1",
    "resourceclaimtemplates",
    namespaced=True,
    kind="ResourceClaimTemplate",
)
