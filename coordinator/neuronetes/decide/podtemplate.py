"""The pods of an AgentPool, from its spec.

:func:`pool_template` is the pod template before the per-pool policies (:mod:`.policy`) run:
the pool's ``spec.template`` (or :func:`default_template`, one vLLM serving container) with

- labels ``neuronetes.io/pool=<pool>`` (:func:`pool_label`: a valid label value for any name),
  annotations ``neuronetes.io/model`` (when named) and ``neuronetes.io/scheduling``
  (``spec.scheduling`` as compact JSON), ``schedulerName``: the AgentPool profile the caller
  names (``topos-agentpools`` in the coordinator, docs/neuronetes.md);
- ``gpuRequirements.count`` as ``nvidia.com/gpu`` limits on the first container, or with
  ``migProfile`` as ``nvidia.com/mig-<profile>``; ``type`` as a required node affinity on
  ``neuronetes.io/gpu-type``; ``memory`` as ``topos.io/gpu-memory-min``; ``topology.locality``
  (``nvlink`` when ``minBandwidth`` is above PCIe's) as ``topos.io/gpu-locality``;
- a gang (``topos.io/gang=<pool>``, ``topos.io/gang-min``) with ``gangScheduling.enabled``;
- ``priorityClassName`` with ``scheduling.priority`` / ``preemption``; data locality
  (:mod:`.locality`).

:func:`pod_for` turns the final template into a Pod owned by the pool (``ownerReferences`` with
``controller: true``: the garbage collector deletes the pods with the pool), labelled with the
template's hash so a changed template replaces the pods.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from common import podkeys
from common.labels import NEURONETES_GPU_TYPE, name_label_value
from coordinator.core.podspec.poolkeys import MODEL_ANNOTATION, POOL_LABEL, SCHEDULING_ANNOTATION
from coordinator.neuronetes.decide.locality import data_locality
from coordinator.neuronetes.decide.pool import PoolSpec, scheduling_json

__all__ = [
    "API_VERSION",
    "CREATED_ANNOTATION",
    "DEFAULT_IMAGE",
    "HASH_LABEL",
    "MODEL_ANNOTATION",
    "POOL_LABEL",
    "SCHEDULING_ANNOTATION",
    "default_template",
    "pod_for",
    "pool_label",
    "pool_template",
    "priority_class_for",
    "priority_class_name",
    "template_hash",
]

# The pool label and the model and scheduling annotations are what the scheduler reads of a pod:
# one definition, the scheduler's (core.podspec.poolkeys), re-exported here.
API_VERSION: Final = "neuronetes.io/v1alpha1"
HASH_LABEL: Final = "neuronetes.io/template-hash"
CREATED_ANNOTATION: Final = "neuronetes.io/created"  # Unix time, microseconds (scale-down order)
POOL_NAMESPACE_LABEL: Final = "neuronetes.io/pool-namespace"
DEFAULT_IMAGE: Final = "vllm/vllm-openai:latest"
SERVING_PORT: Final = 8000
#: Kubernetes' limit on a label value (an object name may be up to 253 characters).
LABEL_VALUE_MAX: Final = 63
_HASH_CHARS: Final = 10


def pool_label(name: str) -> str:
    """The value of ``neuronetes.io/pool`` (and ``topos.io/gang``) for the pool ``name``
    (:func:`common.labels.name_label_value`: a valid label value for any AgentPool name)."""
    return name_label_value(name)


def default_template(pool: PoolSpec, image: str = DEFAULT_IMAGE) -> dict[str, Any]:
    """One container ``server`` running ``image`` (vLLM's OpenAI server, ``--model`` the pool's
    model), serving and exposing metrics on port 8000."""
    container: dict[str, Any] = {
        "name": "server",
        "image": image,
        "ports": [{"name": "http", "containerPort": SERVING_PORT}],
    }
    if pool.model:
        container["args"] = ["--model", pool.model]
    return {"metadata": {}, "spec": {"containers": [container]}}


def priority_class_name(namespace: str, name: str) -> str:
    """``neuronetes-<namespace>-<pool>`` (PriorityClasses are cluster-wide); past 253
    characters, the first 242 (without a trailing ``-`` or ``.``), ``-`` and 10 hex digits of
    the full name's SHA-256, so two long names never share a class."""
    full = f"neuronetes-{namespace}-{name}"
    if len(full) <= 253:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:_HASH_CHARS]
    return f"{full[: 253 - _HASH_CHARS - 1].rstrip('-.')}-{digest}"


def priority_class_for(pool: PoolSpec) -> dict[str, Any]:
    """The pool's PriorityClass: ``scheduling.priority`` (0 when only preemption is given);
    ``preemptionPolicy: Never`` when ``preemption.enabled`` is false."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": priority_class_name(pool.namespace, pool.name),
            "labels": {POOL_LABEL: pool_label(pool.name), POOL_NAMESPACE_LABEL: pool.namespace},
        },
        "value": pool.priority or 0,
        "preemptionPolicy": "Never" if pool.preemption is False else "PreemptLowerPriority",
        "globalDefault": False,
        "description": f"AgentPool {pool.namespace}/{pool.name}",
    }


def _gpu_limits(pool: PoolSpec, container: dict[str, Any]) -> None:
    resources = container.setdefault("resources", {})
    limits = resources.setdefault("limits", {})
    requests = resources.get("requests") or {}
    for table in (limits, requests):
        for name in [n for n in table if n.startswith("nvidia.com/")]:
            del table[name]
    if pool.mig_profile:
        limits[f"{podkeys.MIG_RESOURCE_PREFIX}{pool.mig_profile}"] = str(pool.gpu.count)
    elif pool.gpu.count:
        limits[podkeys.GPU_RESOURCE] = str(pool.gpu.count)
    if not limits:
        del resources["limits"]
    if not resources:
        del container["resources"]


def require_everywhere(spec: dict[str, Any], exprs: list[dict[str, Any]]) -> None:
    """AND ``exprs`` into every required node selector term of a pod spec (terms are ORed, so
    each must carry them), making the first term when there is none."""
    node = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node.setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": []}
    )
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({"matchExpressions": []})
    for term in terms:
        term.setdefault("matchExpressions", []).extend(copy.deepcopy(exprs))


def _gpu_type_affinity(gpu_type: str, spec: dict[str, Any]) -> None:
    require_everywhere(spec, [{"key": NEURONETES_GPU_TYPE, "operator": "In", "values": [gpu_type]}])


def pool_template(
    pool: PoolSpec, image: str = DEFAULT_IMAGE, *, scheduler_name: str
) -> dict[str, Any]:
    """The pod template the pool's spec asks for (before the policies run), for the profile
    ``scheduler_name`` (the scheduler's AgentPool profile)."""
    source = pool.template if pool.template is not None else default_template(pool, image)
    template: dict[str, Any] = copy.deepcopy(dict(source))
    meta = template.setdefault("metadata", {})
    spec = template.setdefault("spec", {})
    labels = meta.setdefault("labels", {})
    annotations = meta.setdefault("annotations", {})
    labels[POOL_LABEL] = pool_label(pool.name)
    if pool.model:
        annotations[MODEL_ANNOTATION] = pool.model
    annotations[SCHEDULING_ANNOTATION] = scheduling_json({"scheduling": pool.scheduling})
    spec["schedulerName"] = scheduler_name
    _gpu_limits(pool, spec["containers"][0])
    if pool.gpu.type:
        _gpu_type_affinity(pool.gpu.type, spec)
    if pool.gpu.memory:
        annotations[podkeys.GPU_MEMORY_MIN.canonical] = pool.gpu.memory
    if pool.gpu.locality:
        annotations[podkeys.GPU_LOCALITY.canonical] = pool.gpu.locality
    if pool.gang_min is not None:
        labels[podkeys.GANG.canonical] = pool_label(pool.name)
        labels[podkeys.GANG_MIN.canonical] = str(pool.gang_min)
        if pool.gang_timeout_s:
            annotations[podkeys.GANG_TIMEOUT.canonical] = f"{pool.gang_timeout_s}s"
    if pool.wants_priority_class:
        spec["priorityClassName"] = priority_class_name(pool.namespace, pool.name)
        spec.pop("priority", None)
    for kind, terms in data_locality(pool.scheduling).items():
        block = spec.setdefault("affinity", {}).setdefault(kind, {})
        block.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).extend(terms)
    return template


def template_hash(template: Mapping[str, Any]) -> str:
    """What makes pods of one template alike: everything but the scheduling gates, which are
    lifted from pods in place."""
    body = copy.deepcopy(dict(template))
    body.get("spec", {}).pop("schedulingGates", None)
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def pod_for(pool: PoolSpec, template: Mapping[str, Any], created: float = 0.0) -> dict[str, Any]:
    """A new Pod of the pool from its final ``template`` (named ``<pool>-<random>``), made at
    ``created`` (Unix time)."""
    body = copy.deepcopy(dict(template))
    meta = body.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    labels[HASH_LABEL] = template_hash(template)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{pool.name}-",
            "namespace": pool.namespace,
            "labels": labels,
            "annotations": {
                **dict(meta.get("annotations") or {}),
                CREATED_ANNOTATION: f"{created:.6f}",
            },
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "AgentPool",
                    "name": pool.name,
                    "uid": pool.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": body.get("spec") or {},
    }
