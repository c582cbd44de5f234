"""NVIDIA ComputeDomains (``resource.nvidia.com/v1beta1``), typed: what placement reads of one —
its UID (the ``domainID`` its channel claims name) and ``spec.numNodes``.

``numNodes`` is, in NVIDIA's published schema (``api/nvidia.com/resource/v1beta1``,
``ComputeDomainSpec``), the intended number of nodes (IMEX daemons), "zero or greater"; since the
driver's DNS-names mode it is recommended to be zero (unknown) and it is deprecated. So 0 (or
absent) means unknown; a negative or non-integer value is refused naming the field and value, and
the domain is then placed as one whose size is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.core.dra.objects import DraObjectError
from coordinator.core.podspec.fields import FieldError, mapping, text

__all__ = ["ComputeDomain", "parse_compute_domain"]


@dataclass(frozen=True, slots=True)
class ComputeDomain:
    namespace: str
    name: str
    uid: str
    num_nodes: int  # 0: not known

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_compute_domain(obj: Mapping[str, Any]) -> ComputeDomain | DraObjectError:
    meta0 = obj.get("metadata", {}) if isinstance(obj, Mapping) else {}
    key = f"{meta0.get('namespace', '?')}/{meta0.get('name', '?')}"
    try:
        meta = mapping(obj, "metadata", "")
        spec = mapping(obj, "spec", "")
        nodes = spec.get("numNodes", 0)
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 0:
            raise FieldError("spec.numNodes", f"{nodes!r} is not a number of nodes (0 or more)")
        return ComputeDomain(
            namespace=text(meta, "namespace", "metadata") or "default",
            name=text(meta, "name", "metadata"),
            uid=text(meta, "uid", "metadata"),
            num_nodes=nodes,
        )
    except FieldError as bad:
        return DraObjectError("ComputeDomain", key, f"{bad.field}: {bad.message}")
