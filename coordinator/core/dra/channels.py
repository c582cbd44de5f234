"""IMEX channel claims of NVIDIA ComputeDomains: which ComputeDomain a ResourceClaim (and so a
pod) belongs to, read from the claim's opaque configuration (``driver:
compute-domain.nvidia.com``, ``kind: ComputeDomainChannelConfig``, ``domainID: <UID>``)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Final

from coordinator.core.dra.objects import ResourceClaim
from coordinator.core.dra.state import DraState
from coordinator.core.podspec.parse import PodRequest

__all__ = [
    "CHANNEL_DRIVER",
    "CHANNEL_KIND",
    "DomainChannels",
    "claim_domain",
    "domain_channels",
    "pod_domain",
]

CHANNEL_DRIVER: Final = "compute-domain.nvidia.com"
CHANNEL_KIND: Final = "ComputeDomainChannelConfig"


def claim_domain(claim: ResourceClaim) -> str | None:
    """The ComputeDomain UID a channel claim's configuration names, else None."""
    for config in claim.config:
        opaque = config.get("opaque")
        if not isinstance(opaque, Mapping) or opaque.get("driver") != CHANNEL_DRIVER:
            continue
        params = opaque.get("parameters")
        if isinstance(params, Mapping) and params.get("kind") == CHANNEL_KIND:
            domain = params.get("domainID")
            if isinstance(domain, str) and domain:
                return domain
    return None


def pod_domain(pod: PodRequest, dra: DraState) -> str | None:
    """The ComputeDomain whose channel the pod claims (its claims resolved in ``dra``)."""
    for entry in pod.claims:
        name = entry.resolved_name
        claim = dra.claim(pod.namespace, name) if name else None
        if claim is not None:
            domain = claim_domain(claim)
            if domain is not None:
                return domain
    return None


@dataclass(frozen=True, slots=True)
class DomainChannels:
    cliques: frozenset[str]  # the cliques its allocated channels are on
    waiting: int  # its channel claims not allocated


def domain_channels(
    dra: DraState,
    domain: str,
    clique_of: Mapping[str, str],
    labels_of: Callable[[str], Mapping[str, str] | None],
    *,
    besides: Collection[tuple[str, str]] = (),
) -> DomainChannels:
    """Where the ComputeDomain ``domain``'s channel claims (but those ``besides``, namespace and
    name) are allocated — the cliques (``clique_of``: node → clique) of the nodes they reach —
    and how many are not allocated yet."""
    cliques: set[str] = set()
    waiting = 0
    for claim in dra.claims:
        if (claim.namespace, claim.name) in besides or claim_domain(claim) != domain:
            continue
        allocation = claim.allocation
        if allocation is None:
            waiting += 1
            continue
        named = allocation.named_nodes()
        if named is not None:
            cliques.update(c for n in named if (c := clique_of.get(n)) is not None)
            continue
        for node, clique in clique_of.items():
            labels = labels_of(node)
            if labels is not None and allocation.reaches(node, labels):
                cliques.add(clique)
    return DomainChannels(frozenset(cliques), waiting)
