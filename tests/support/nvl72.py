"""NVL72 racks as the planners see them: trays of 4 GPUs labelled with their NVLink clique.

Shared by the clique unit tests and the real-control-plane clique test.
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.core.domains.capacity import GPU, NodeState

CLUSTER_UUID = "3c5b0f2e-8a4d-4e6b-9f1a-2d7c6e5b4a39"


def clique(rack: int) -> str:
    """GFD's ``nvidia.com/gpu.clique`` value of rack ``rack``."""
    return f"{CLUSTER_UUID}.{rack}"


def tray(rack: int, i: int) -> str:
    return f"r{rack}-t{i:02d}"


def tray_labels(
    rack: int, *, leaf: str | None = "leaf-1", spine: str | None = "spine-1"
) -> dict[str, str]:
    labels = {"nvidia.com/gpu.clique": clique(rack)}
    if leaf is not None:
        labels["topos.io/leaf"] = leaf
    if spine is not None:
        labels["topos.io/spine"] = spine
    return labels


def racks(
    count: int,
    *,
    trays: int = 18,
    used: Mapping[str, int] | None = None,
    leaf_of: Mapping[int, str | None] | None = None,
    labels: Mapping[str, Mapping[str, str]] | None = None,
    cordoned: frozenset[str] = frozenset(),
) -> list[NodeState]:
    """``count`` racks ``r<rack>-t<NN>`` of ``trays`` 4-GPU trays, rack ``r`` in clique ``r``.

    ``used``: tray → GPUs busy; ``leaf_of``: rack → its leaf (default ``leaf-1`` for all);
    ``labels``: tray → labels replacing / adding to its own (an empty value removes one).
    """
    used = used or {}
    out: list[NodeState] = []
    for r in range(1, count + 1):
        leaf = (leaf_of or {}).get(r, "leaf-1")
        for i in range(1, trays + 1):
            name = tray(r, i)
            own = tray_labels(r, leaf=leaf, spine="spine-1" if leaf else None)
            own.update((labels or {}).get(name, {}))
            busy = used.get(name, 0)
            out.append(
                NodeState(
                    name=name,
                    labels={k: v for k, v in own.items() if v},
                    allocatable={GPU: 4, "cpu": 144_000, "pods": 110},
                    free={GPU: 4 - busy, "cpu": 144_000, "pods": 110},
                    schedulable=name not in cordoned,
                    link="nvswitch",
                )
            )
    return out
