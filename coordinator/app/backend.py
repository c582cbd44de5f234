"""Where the cluster lives: the API server (``topos coordinator``) or memory (``--in-memory``,
``topos demo``). The wiring (:func:`coordinator.app.main.wire`) takes one of these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where ``--in-memory`` runs: the API-server path never loads it
    from coordinator.adapters.memory.cluster import MemoryCluster


@dataclass(frozen=True, slots=True)
class KubeBackend:
    """The API server: Nodes and Pods mirrored into the inventory, binds and Events written
    there, TokenReview for authentication, a Lease for leader election."""

    kubeconfig: str | None = None
    """Kubeconfig of the API server (default: in-cluster, then ``$KUBECONFIG``)."""


@dataclass(frozen=True, slots=True)
class MemoryBackend:
    """No API server: Node and Pod objects live in ``cluster``, over the app's inventory (which
    is ``cluster.inventory``). Authentication and leader election are off."""

    cluster: MemoryCluster


Backend = KubeBackend | MemoryBackend
