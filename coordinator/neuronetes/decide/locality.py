"""``spec.scheduling.dataLocality`` as pod affinity.

- ``vectorStoreAffinity: [names]`` — *preferred* pod affinity (same node,
  ``kubernetes.io/hostname``) to pods labelled ``neuronetes.io/vector-store=<name>``, and to pods
  named so by their StatefulSet (``statefulset.kubernetes.io/pod-name``: ``weaviate-shard-0``);
- ``antiAffinity: [classes]`` — *preferred* anti-affinity to pods labelled
  ``neuronetes.io/workload-class=<class>`` (``training-jobs``, ``batch-inference``);
- ``localityWeight: low | medium | high`` — the terms' weight, 10 / 50 / 100 (default medium).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["LOCALITY_WEIGHTS", "VECTOR_STORE_LABEL", "WORKLOAD_CLASS_LABEL", "data_locality"]

VECTOR_STORE_LABEL: Final = "neuronetes.io/vector-store"
WORKLOAD_CLASS_LABEL: Final = "neuronetes.io/workload-class"
STS_POD_NAME: Final = "statefulset.kubernetes.io/pod-name"
HOSTNAME: Final = "kubernetes.io/hostname"
LOCALITY_WEIGHTS: Final = {"low": 10, "medium": 50, "high": 100}


def _names(value: object) -> list[str]:
    if not isinstance(value, list):
        return []
    return [str(v) for v in value if isinstance(v, str) and v]


def _term(key: str, names: list[str], weight: int) -> dict[str, Any]:
    return {
        "weight": weight,
        "podAffinityTerm": {
            "labelSelector": {
                "matchExpressions": [{"key": key, "operator": "In", "values": names}]
            },
            "topologyKey": HOSTNAME,
        },
    }


def data_locality(scheduling: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The preferred terms to add: ``{"podAffinity": [...], "podAntiAffinity": [...]}``."""
    raw = scheduling.get("dataLocality")
    if not isinstance(raw, Mapping):
        return {}
    weight = LOCALITY_WEIGHTS.get(str(raw.get("localityWeight") or "medium"), 50)
    out: dict[str, list[dict[str, Any]]] = {}
    stores = _names(raw.get("vectorStoreAffinity"))
    if stores:
        out["podAffinity"] = [
            _term(VECTOR_STORE_LABEL, stores, weight),
            _term(STS_POD_NAME, stores, weight),
        ]
    classes = _names(raw.get("antiAffinity"))
    if classes:
        out["podAntiAffinity"] = [_term(WORKLOAD_CLASS_LABEL, classes, weight)]
    return out
