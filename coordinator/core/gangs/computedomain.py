"""Pods of one NVIDIA ComputeDomain run in one NVLink clique.

A ComputeDomain (``resource.nvidia.com/v1beta1``, NVIDIA's DRA driver for GPUs) lets a multi-node
job share GPU memory over NVLink through IMEX channels. Its controller writes a
ResourceClaimTemplate (``spec.channel.resourceClaimTemplate.name``); every pod of the job takes
a channel claim from it, whose opaque configuration names the domain:
``{driver: compute-domain.nvidia.com, parameters: {kind: ComputeDomainChannelConfig, domainID:
<the ComputeDomain's UID>}}``. IMEX works inside one NVLink domain, so the pods belong in one
clique (``nvidia.com/gpu.clique``).

For a gang whose members carry channel claims of one ComputeDomain, :func:`compute_domain_pin`
says which: with none of the domain's channels allocated yet, the gang is kept inside one clique
(its level B, required); once some are, on nodes of one clique, the new members go to that
clique. Members of two ComputeDomains, or channels already spread over two cliques, are refused
with a message naming them. Nothing is read from the ComputeDomain object itself: the claims
carry all that placement needs (docs/topology.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.core.domains.layout import Layout, sorted_names
from coordinator.core.dra.channels import (
    CHANNEL_DRIVER,
    claim_domain,
    domain_channels,
    pod_domain,
)
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status

__all__ = ["CHANNEL_DRIVER", "DomainPin", "claim_domain", "compute_domain_pin", "pod_domain"]


@dataclass(frozen=True, slots=True)
class DomainPin:
    domain: str  # the ComputeDomain's UID
    clique: str | None  # the clique its allocated channels are in; None: none allocated yet

    @property
    def note(self) -> str:
        where = f"its clique {self.clique}" if self.clique else "one NVLink clique"
        return f"ComputeDomain {self.domain}: its pods in {where}"


def compute_domain_pin(
    pods: Sequence[PodRequest], snapshot: Snapshot, layout: Layout
) -> DomainPin | Status | None:
    """Which ComputeDomain the gang's pods belong to and where it already runs; None when they
    claim no channel (or the cluster has no cliques)."""
    dra = snapshot.dra
    if dra.empty or not layout.cliques:
        return None
    found = {d for p in pods if (d := pod_domain(p, dra)) is not None}
    if not found:
        return None
    if len(found) > 1:
        names = ", ".join(sorted(found))
        return Status.unresolvable(
            f"members claim channels of {len(found)} ComputeDomains ({names}): "
            "a pod group runs in one"
        )
    domain = found.pop()
    own = {(p.namespace, e.resolved_name) for p in pods for e in p.claims}
    channels = domain_channels(dra, domain, layout.clique_of, snapshot.labels_of, besides=own)
    cliques = channels.cliques
    if len(cliques) > 1:
        return Status.unresolvable(
            f"ComputeDomain {domain} already has channels in {len(cliques)} NVLink cliques "
            f"({', '.join(sorted_names(cliques))}): no one clique holds its pods"
        )
    return DomainPin(domain, next(iter(cliques)) if cliques else None)
