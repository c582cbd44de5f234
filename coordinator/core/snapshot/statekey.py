"""Tokens naming a node's scheduling state, so that nodes alike can share node-local results.

Two :class:`~coordinator.core.snapshot.nodeinfo.NodeInfo` with the same :func:`state_key` token
have the same labels (but the hostname), allocatable, taints, cordon, readiness, staleness,
hardware (the same ``NodeTopology`` but for what names this very machine: hostname, UUIDs, PCI
addresses), DRA-held GPUs, cached models, requested resources (real and as scoring counts
them), device state (free GPUs, room on
shared GPUs, MIG instances, NUMA capacity), GPU slots in use, shared GPUs' sums and bound host
ports. A node-local plugin declaring ``alike_nodes = True`` reads nothing else of a node (not
its name, hostname label or pods): its verdicts, placements and scores are then the same on
every node of one token (the framework shares them, see :mod:`coordinator.core.framework.memo`).
Tokens are plain objects, cheap to hash; a ``NodeInfo`` made by hand (not by
``NodeInfo.build`` or ``adding``) has none and shares nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec

from common.linkhealth import degraded_pairs, fabric_degraded
from common.model import NodeTopology
from coordinator.core.podspec.ports import HostPort
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.snapshot.devices import SharedGpu

__all__ = ["shape_key", "state_key"]

HOSTNAME: Final = "kubernetes.io/hostname"
_LIMIT: Final = 200_000

_TOPOLOGIES: dict[int, tuple[NodeTopology, object]] = {}  # id → (the object, its token)
_HARDWARE: dict[tuple[object, ...], object] = {}
_SHAPES: dict[tuple[object, ...], object] = {}
_STATES: dict[tuple[object, ...], object] = {}


def _token(table: dict[tuple[object, ...], object], key: tuple[object, ...]) -> object:
    token = table.get(key)
    if token is None:
        if len(table) >= _LIMIT:
            table.clear()  # later nodes get new tokens: fewer shared, never wrongly
        token = table[key] = object()
    return token


def _topology_token(topology: NodeTopology | None) -> object:
    """One token per hardware shape: the topology without what names this very machine (its
    hostname, GPU and MIG UUIDs, PCI addresses, free memory of the moment), which node-local
    plugins never read, and of the agent's health readings only what placement reads (the
    degraded NVLink pairs, whether the fabric is degraded: ``common/linkhealth.py``). Looked up
    by object first (holding it, so its id is not reused)."""
    if topology is None:
        return None
    known = _TOPOLOGIES.get(id(topology))
    if known is not None and known[0] is topology:
        return known[1]
    gpus = tuple(
        msgspec.structs.replace(
            g,
            uuid="",
            pci_bus_id=None,
            memory_free_mib=None,
            mig_instances=tuple(msgspec.structs.replace(m, uuid=None) for m in g.mig_instances),
            health=None,  # counters move on every node; placement reads only what follows
        )
        for g in topology.gpus
    )
    health = (tuple(sorted(degraded_pairs(topology))), fabric_degraded(topology) is not None)
    token = _token(_HARDWARE, (msgspec.structs.replace(topology, hostname="", gpus=gpus), health))
    if len(_TOPOLOGIES) >= _LIMIT:
        _TOPOLOGIES.clear()
    _TOPOLOGIES[id(topology)] = (topology, token)
    return token


def shape_key(
    labels: Mapping[str, str],
    allocatable: Mapping[str, int],
    taints: tuple[Taint, ...],
    effective_taints: tuple[Taint, ...],
    flags: tuple[bool, bool, bool],  # unschedulable, ready, stale
    topology: NodeTopology | None,
    dra_held: frozenset[str],
    cached_models: frozenset[str],
) -> object:
    """What adding pods never changes (a node's name and hostname label left out)."""
    return _token(
        _SHAPES,
        (
            tuple(sorted((k, v) for k, v in labels.items() if k != HOSTNAME)),
            tuple(sorted(allocatable.items())),
            taints,
            effective_taints,
            flags,
            _topology_token(topology),
            dra_held,
            cached_models,
        ),
    )


def state_key(
    shape: object,
    requested: Mapping[str, int],
    nonzero_requested: tuple[int, int],
    device_token: object,
    gpu_slots_used: int,
    shared: Mapping[int, SharedGpu],
    used_ports: tuple[HostPort, ...],
) -> object:
    """``shape`` (from :func:`shape_key`) with what the node's pods take."""
    return _token(
        _STATES,
        (
            shape,
            tuple(sorted(requested.items())),
            nonzero_requested,
            device_token,
            gpu_slots_used,
            tuple(sorted((i, s.milli, s.memory_mib) for i, s in shared.items())) if shared else (),
            used_ports,
        ),
    )
