"""IMEX channel claims of NVIDIA ComputeDomains: which ComputeDomain a ResourceClaim (and so a
pod) belongs to, read from the claim's opaque configuration (``driver:
compute-domain.nvidia.com``, ``kind: ComputeDomainChannelConfig``, ``domainID: <UID>``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from coordinator.core.dra.objects import ResourceClaim
from coordinator.core.dra.state import DraState
from coordinator.core.podspec.parse import PodRequest

__all__ = ["CHANNEL_DRIVER", "CHANNEL_KIND", "claim_domain", "pod_domain"]

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
