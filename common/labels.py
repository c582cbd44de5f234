"""The node label and annotation vocabulary (docs/design.md §2) and the label-value grammar.

Everything the agent writes on a Node, and everything the coordinator reads back, is named here.
Kubernetes accepts a label value only if it is at most 63 characters of ``[A-Za-z0-9._-]`` that
starts and ends with an alphanumeric (or is empty). Hardware does not care: product names carry
spaces and can be long, CPU lists carry commas. Two rules keep the agent from ever sending a value
the API server would reject:

* **free text** (a product name) is *sanitised*: spaces become ``-`` the way NVIDIA's GPU Feature
  Discovery writes ``NVIDIA-A100-SXM4-40GB``, other illegal characters become ``-``, the result is
  cut to 63 characters; when that lost information, the exact text is also written as an
  annotation under the same key.
* **structured values** (``0-15,32-47``, ``1g.5gb:7,2g.10gb:3``) are never mangled: a value that is
  not a legal label value is written as an annotation under the same key instead of a label.

``NodeLabels`` is the result of a labeler: labels and annotations, merged with ``merge`` (later
wins).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

# --- prefixes --------------------------------------------------------------------------------

PREFIX: Final = "topos.io/"
GFD_PREFIX: Final = "nvidia.com/"
NEURONETES_PREFIX: Final = "neuronetes.io/"
KUBENEXUS_NUMA_PREFIX: Final = "numa.kubenexus.io/"

# --- topos.io labels (docs/design.md §2) -----------------------------------------------------

GPU_PRODUCT: Final = PREFIX + "gpu.product"
GPU_COUNT: Final = PREFIX + "gpu.count"
GPU_MEMORY: Final = PREFIX + "gpu.memory"  # MiB of the smallest GPU
GPU_FAMILY: Final = PREFIX + "gpu.family"
GPU_TOPOLOGY: Final = PREFIX + "gpu.topology"  # nvswitch | nvlink | pcie
MIG_CAPABLE: Final = PREFIX + "mig.capable"
MIG_ENABLED: Final = PREFIX + "mig.enabled"
NUMA_COUNT: Final = PREFIX + "numa.count"
DRIVER_VERSION: Final = PREFIX + "driver.version"
CUDA_VERSION: Final = PREFIX + "cuda.version"
GPU_HEALTHY: Final = PREFIX + "gpu.healthy"  # count of healthy GPUs

# Network tiers (docs/design.md §4): set by people or `topos devcluster`, never by the agent.
LEAF: Final = PREFIX + "leaf"
SPINE: Final = PREFIX + "spine"

# --- topos.io annotations ----------------------------------------------------------------------

TOPOLOGY: Final = PREFIX + "topology"  # compact JSON of common.model.NodeTopology
SUMMARY: Final = PREFIX + "summary"  # one human-readable line for `kubectl describe node`
GPUS: Final = PREFIX + "gpus"  # one human-readable line per GPU
GPU_HEALTH: Final = PREFIX + "gpu.health"  # why GPUs are unhealthy (absent when all are healthy)
MIG_LAYOUT: Final = PREFIX + "mig.layout"  # MIG instances per profile, e.g. "1g.10gb:7,3g.40gb:1"
OWNED_KEYS: Final = PREFIX + "owned-keys"  # JSON: which label/annotation keys the agent wrote
MODELS: Final = PREFIX + "models"  # compact JSON list of the model ids in the node's HF cache
MODELS_ANNOTATION_MAX_BYTES: Final = 16 * 1024

# Kubernetes limits the *sum* of a Node's annotations to 256 KiB; the topology annotation stays
# well inside that so other writers keep room.
TOPOLOGY_ANNOTATION_MAX_BYTES: Final = 200 * 1024

UNKNOWN: Final = "unknown"

# --- compatibility sets ------------------------------------------------------------------------

# NVIDIA GPU Feature Discovery (k8s-device-plugin docs/gpu-feature-discovery).
GFD_GPU_PRESENT: Final = GFD_PREFIX + "gpu.present"
GFD_GPU_PRODUCT: Final = GFD_PREFIX + "gpu.product"
GFD_GPU_COUNT: Final = GFD_PREFIX + "gpu.count"
GFD_GPU_MEMORY: Final = GFD_PREFIX + "gpu.memory"  # MiB
GFD_GPU_FAMILY: Final = GFD_PREFIX + "gpu.family"
GFD_COMPUTE_MAJOR: Final = GFD_PREFIX + "gpu.compute.major"
GFD_COMPUTE_MINOR: Final = GFD_PREFIX + "gpu.compute.minor"
GFD_DRIVER_MAJOR: Final = GFD_PREFIX + "cuda.driver.major"
GFD_DRIVER_MINOR: Final = GFD_PREFIX + "cuda.driver.minor"
GFD_DRIVER_REV: Final = GFD_PREFIX + "cuda.driver.rev"
GFD_RUNTIME_MAJOR: Final = GFD_PREFIX + "cuda.runtime.major"
GFD_RUNTIME_MINOR: Final = GFD_PREFIX + "cuda.runtime.minor"
GFD_MIG_CAPABLE: Final = GFD_PREFIX + "mig.capable"
GFD_MIG_STRATEGY: Final = GFD_PREFIX + "mig.strategy"
# NVIDIA's device plugin sharing (time-slicing / MPS): each GPU advertised as this many replicas.
GFD_SHARING_STRATEGY: Final = GFD_PREFIX + "gpu.sharing-strategy"  # none | time-slicing | mps
GFD_REPLICAS: Final = GFD_PREFIX + "gpu.replicas"
# The multi-node NVLink domain (NVL72 rack) the node's GPUs are in: "<clusterUUID>.<cliqueId>".
# Written only when the node has none (GFD's own value wins; agent.publish.DEFER_TO_OTHERS).
GFD_GPU_CLIQUE: Final = GFD_PREFIX + "gpu.clique"

# The Node condition carrying the GPUs' health (docs/health.md): True when every GPU is healthy.
GPU_HEALTH_CONDITION: Final = "ToposGPUHealthy"


def gfd_mig_key(profile: str, attribute: str) -> str:
    """GFD "mixed" strategy name: ``nvidia.com/mig-3g.20gb.count``."""
    return f"{GFD_PREFIX}mig-{profile}.{attribute}"


# NeuroNetes (seed 000).
NEURONETES_GPU_TYPE: Final = NEURONETES_PREFIX + "gpu-type"  # "A100"
NEURONETES_GPU_MEMORY: Final = NEURONETES_PREFIX + "gpu-memory"  # "40Gi"
NEURONETES_GPU_COUNT: Final = NEURONETES_PREFIX + "gpu-count"
NEURONETES_GPU_TOPOLOGY: Final = NEURONETES_PREFIX + "gpu-topology"  # nvlink | pcie
NEURONETES_MIG_CAPABLE: Final = NEURONETES_PREFIX + "mig-capable"
NEURONETES_MIG_CONFIG: Final = NEURONETES_PREFIX + "mig-config"  # "1g.5gb:7,2g.10gb:3"

# KubeNexus NUMA (seed 002).
KUBENEXUS_NODE_COUNT: Final = KUBENEXUS_NUMA_PREFIX + "node-count"


def kubenexus_cpus_key(numa_id: int) -> str:
    return f"{KUBENEXUS_NUMA_PREFIX}node-{numa_id}-cpus"


def kubenexus_memory_key(numa_id: int) -> str:
    return f"{KUBENEXUS_NUMA_PREFIX}node-{numa_id}-memory"


# Prefixes under which the agent may ever write; ownership is still checked key by key
# (OWNED_KEYS), so a foreign key under one of these prefixes (topos.io/leaf, a GFD label written by
# GFD itself) is never removed.
AGENT_PREFIXES: Final = (PREFIX, GFD_PREFIX, NEURONETES_PREFIX, KUBENEXUS_NUMA_PREFIX)

# --- the grammar --------------------------------------------------------------------------------

LABEL_VALUE_MAX: Final = 63
_LABEL_VALUE_RE: Final = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")
_ILLEGAL_RUN_RE: Final = re.compile(r"[^A-Za-z0-9._-]+")
_NON_ALNUM_ENDS_RE: Final = re.compile(r"^[._-]+|[._-]+$")
_DNS1123_SUBDOMAIN_RE: Final = re.compile(
    r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$"
)


_DNS1123_LABEL_RE: Final = re.compile(r"^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$")
DNS1123_LABEL_RULE: Final = (
    "a DNS-1123 label: at most 63 lowercase letters, digits and '-', "
    "starting and ending with a letter or digit"
)
DNS1123_SUBDOMAIN_RULE: Final = (
    "a DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' and '.', "
    "each dot-separated part starting and ending with a letter or digit"
)


def is_dns1123_label(name: str) -> bool:
    """True when Kubernetes accepts ``name`` as a namespace's name."""
    return _DNS1123_LABEL_RE.fullmatch(name) is not None


def is_dns1123_subdomain(name: str) -> bool:
    """True when Kubernetes accepts ``name`` as most objects' names (a Lease, a Node)."""
    return len(name) <= 253 and _DNS1123_SUBDOMAIN_RE.fullmatch(name) is not None


def check_namespace_name(key: str, value: str) -> None:
    """Raise ``ValueError`` naming ``key`` and ``value`` unless ``value`` can name a namespace."""
    if not is_dns1123_label(value):
        raise ValueError(f"{key}: {value!r} is not a namespace name ({DNS1123_LABEL_RULE})")


def check_object_name(key: str, value: str) -> None:
    """Raise ``ValueError`` naming ``key`` and ``value`` unless ``value`` can name an object."""
    if not is_dns1123_subdomain(value):
        raise ValueError(f"{key}: {value!r} is not an object name ({DNS1123_SUBDOMAIN_RULE})")


def is_label_value(value: str) -> bool:
    """True when Kubernetes accepts ``value`` as a label value (the empty string included)."""
    return len(value) <= LABEL_VALUE_MAX and _LABEL_VALUE_RE.match(value) is not None


def is_label_key(key: str) -> bool:
    """True for ``[prefix/]name`` with a DNS-subdomain prefix (≤253) and a ≤63-char name."""
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix)):
        return False
    return name != "" and is_label_value(name)


def name_label_value(name: str) -> str:
    """A label value standing for the object ``name`` (a workload or pool: object names may be
    253 characters, label values 63): the name itself when it is at most 63 characters; a longer
    name becomes its first 52 characters (without a trailing ``-`` or ``.``), ``-`` and 10 hex
    digits of the name's SHA-256 — the same for the same name, different for two names sharing
    their first 52 characters."""
    if len(name) <= LABEL_VALUE_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_NAME_HASH_CHARS]
    head = name[: LABEL_VALUE_MAX - _NAME_HASH_CHARS - 1].rstrip("-.")
    return f"{head}-{digest}"


_NAME_HASH_CHARS: Final = 10


def sanitise_label_value(text: str) -> str:
    """The closest legal label value: runs of illegal characters (spaces included) become one
    ``-``, ends are trimmed to alphanumerics, the result is cut to 63 characters. May be ``""``
    when nothing alphanumeric remains."""
    value = _ILLEGAL_RUN_RE.sub("-", text.strip())
    value = value[:LABEL_VALUE_MAX]
    return _trim_ends(value)


def _trim_ends(value: str) -> str:
    return _NON_ALNUM_ENDS_RE.sub("", value)


# --- labeler results ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeLabels:
    """Labels and annotations one labeler wants on the Node. Every label value is legal."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, value in self.labels.items():
            if not is_label_key(key):
                raise ValueError(f"illegal label key {key!r}")
            if not is_label_value(value):
                raise ValueError(f"illegal value {value!r} for label {key}")
        for key in self.annotations:
            if not is_label_key(key):
                raise ValueError(f"illegal annotation key {key!r}")

    def merge(self, other: NodeLabels) -> NodeLabels:
        """Both sets; where a key is in both, ``other`` wins."""
        return NodeLabels(
            labels={**self.labels, **other.labels},
            annotations={**self.annotations, **other.annotations},
        )


def merge(parts: Iterable[NodeLabels]) -> NodeLabels:
    """Merge in order; later wins."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    for part in parts:
        labels.update(part.labels)
        annotations.update(part.annotations)
    return NodeLabels(labels=labels, annotations=annotations)


class LabelBuilder:
    """Collects one labeler's output, applying the two rules of this module."""

    __slots__ = ("_annotations", "_labels")

    def __init__(self) -> None:
        self._labels: dict[str, str] = {}
        self._annotations: dict[str, str] = {}

    def text(self, key: str, value: str | None) -> None:
        """Free text: sanitised into a label (``unknown`` when ``None`` or nothing is left);
        the exact text also goes to an annotation when sanitising lost more than spaces."""
        if value is None:
            self._labels[key] = UNKNOWN
            return
        clean = sanitise_label_value(value)
        self._labels[key] = clean or UNKNOWN
        if clean != _spaces_to_dashes(value):
            self._annotations[key] = value

    def exact(self, key: str, value: str | None) -> None:
        """A structured value: a label when legal, otherwise an annotation under the same key
        (``unknown`` label when ``None``)."""
        if value is None:
            self._labels[key] = UNKNOWN
        elif is_label_value(value):
            self._labels[key] = value
        else:
            self._annotations[key] = value

    def number(self, key: str, value: int | None) -> None:
        self._labels[key] = UNKNOWN if value is None else str(value)

    def flag(self, key: str, value: bool | None) -> None:
        self._labels[key] = UNKNOWN if value is None else ("true" if value else "false")

    def annotation(self, key: str, value: str) -> None:
        self._annotations[key] = value

    def build(self) -> NodeLabels:
        return NodeLabels(labels=dict(self._labels), annotations=dict(self._annotations))


def _spaces_to_dashes(text: str) -> str:
    return "-".join(text.split())


__all__ = [
    "AGENT_PREFIXES",
    "DNS1123_LABEL_RULE",
    "DNS1123_SUBDOMAIN_RULE",
    "LABEL_VALUE_MAX",
    "PREFIX",
    "UNKNOWN",
    "LabelBuilder",
    "NodeLabels",
    "check_namespace_name",
    "check_object_name",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "is_label_key",
    "is_label_value",
    "merge",
    "sanitise_label_value",
]
