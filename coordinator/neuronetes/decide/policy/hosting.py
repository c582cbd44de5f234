"""Whether a node could take one more pod of a pool now — what the cost decision tree asks of
spot capacity before it says ``use-spot``.

A node can host the pool's pod when the pod's ``nodeSelector`` and required node affinity match
its labels, the pod tolerates its ``NoSchedule`` and ``NoExecute`` taints, and it has the pod's
GPUs free (whole ``nvidia.com/gpu`` or the pod's MIG instances; a node whose free counts are not
known is judged on its GPU total). CPU, memory and in-node topology are the scheduler's to judge:
this is the static fit, not a placement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from common.podkeys import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from coordinator.core.podspec.affinity import node_affinity
from coordinator.core.podspec.fields import FieldError, str_map
from coordinator.core.podspec.selectors import match_node_terms
from coordinator.core.podspec.tolerations import Taint, tolerations

__all__ = ["can_host"]

_HARD: Final = ("NoSchedule", "NoExecute")


def _devices(spec: Mapping[str, Any]) -> dict[str, int]:
    """What the pod's containers ask of ``nvidia.com/*`` (limits, else requests)."""
    out: dict[str, int] = {}
    for container in spec.get("containers") or ():
        resources = container.get("resources") or {}
        asks = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for name, value in asks.items():
            if name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX):
                try:
                    out[name] = out.get(name, 0) + int(str(value))
                except ValueError:
                    continue
    return out


def can_host(
    name: str,
    labels: Mapping[str, str],
    taints: tuple[Taint, ...],
    gpus: int,
    free: Mapping[str, int] | None,
    template: Mapping[str, Any],
) -> bool:
    """Whether node ``name`` (its labels, taints, GPU total and free extended resources —
    ``None``: not known) could take one more pod of ``template`` now."""
    spec: Mapping[str, Any] = template.get("spec") or {}
    try:
        selector = str_map(spec, "nodeSelector", "spec")
        affinity = node_affinity((spec.get("affinity") or {}).get("nodeAffinity") or {}, "spec")
        tolerated = tolerations(spec)
    except FieldError:
        return False  # a template the scheduler would refuse hosts nowhere
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    required = affinity.required if affinity is not None else None
    if required is not None and not match_node_terms(required, name, labels):
        return False
    for taint in taints:
        if taint.effect in _HARD and not any(t.tolerates(taint) for t in tolerated):
            return False
    for resource, count in _devices(spec).items():
        if free is not None:
            have = free.get(resource, 0)
        else:
            have = gpus if resource == GPU_RESOURCE else 0
        if have < count:
            return False
    return True
