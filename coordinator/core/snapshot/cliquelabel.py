"""Whether a node's ``nvidia.com/gpu.clique`` value is one Topos trusts: well formed (GFD's
``<clusterUUID>.<cliqueId>``) on a tray whose NVLink fabric is not degraded or down. Read by the
domain tree (:mod:`coordinator.core.domains.cliques`) and the per-pod plugins alike."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

__all__ = ["FABRIC_BAD", "FABRIC_LABEL", "clique_problem", "trusted_clique"]

#: The node's multi-node NVLink fabric health, when something other than ``healthy``: a tray
#: whose fabric is ``degraded`` or ``down`` is taken out of its clique.
FABRIC_LABEL: Final = "topos.io/gpu.fabric"
FABRIC_BAD: Final = frozenset({"degraded", "down"})

_CLIQUE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\.[0-9]{1,10}$"
)


def clique_problem(key: str, value: str) -> str | None:
    """Why ``value`` is not a clique in GFD's format, or None when it is."""
    if _CLIQUE.match(value):
        return None
    return f"label {key}={value!r} is not <clusterUUID>.<cliqueId>"


def trusted_clique(labels: Mapping[str, str], key: str) -> str | None:
    """The node's clique (label ``key``) when well formed and its fabric is healthy, else None
    (the tree's other check, a tray its rack-mates contradict, needs the whole leaf)."""
    value = labels.get(key)
    if not value or clique_problem(key, value) is not None:
        return None
    if labels.get(FABRIC_LABEL, "") in FABRIC_BAD:
        return None
    return value
