"""Leaf–spine test clusters built from plain lists (shared by the domain tests)."""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.core.domains.capacity import GPU, NodeState


def fabric(
    *,
    spines: int = 2,
    leaves_per_spine: int = 4,
    nodes_per_leaf: int = 4,
    gpus: int = 8,
    used: Mapping[str, int] | None = None,
    zone: bool = False,
) -> list[NodeState]:
    """``spine-1..`` × ``leaf-1..`` (numbered across spines) × nodes ``l<leaf>-n<i>``.

    ``used`` maps node name → GPUs already busy there.
    """
    used = used or {}
    out: list[NodeState] = []
    leaf_no = 0
    for s in range(1, spines + 1):
        for _ in range(leaves_per_spine):
            leaf_no += 1
            for i in range(1, nodes_per_leaf + 1):
                name = f"l{leaf_no}-n{i}"
                labels = {"topos.io/leaf": f"leaf-{leaf_no}", "topos.io/spine": f"spine-{s}"}
                if zone:
                    labels["topology.kubernetes.io/zone"] = f"zone-{s}"
                busy = used.get(name, 0)
                out.append(
                    NodeState(
                        name=name,
                        labels=labels,
                        allocatable={GPU: gpus, "cpu": 64_000, "memory": 512 * 2**30, "pods": 110},
                        free={
                            GPU: gpus - busy,
                            "cpu": 64_000,
                            "memory": 512 * 2**30,
                            "pods": 110,
                        },
                    )
                )
    return out


def fill_leaf(leaf: int, *, nodes_per_leaf: int = 4, gpus: int = 8) -> dict[str, int]:
    """A ``used`` map making every node of one leaf fully busy."""
    return {f"l{leaf}-n{i}": gpus for i in range(1, nodes_per_leaf + 1)}
