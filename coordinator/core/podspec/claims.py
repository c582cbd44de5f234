"""A pod's Dynamic Resource Allocation references (``spec.resourceClaims``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PodClaim"]


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of ``spec.resourceClaims``.

    Exactly one of ``claim_name`` (``resourceClaimName``: a claim the user created) and
    ``template_name`` (``resourceClaimTemplateName``: kube-controller-manager creates the claim)
    is set. ``generated_name`` is the claim created from the template, read from
    ``status.resourceClaimStatuses`` ("" until the controller has created it).
    """

    name: str
    claim_name: str = ""
    template_name: str = ""
    generated_name: str = ""

    @property
    def resolved_name(self) -> str:
        """The ResourceClaim this entry stands for ("" while a template claim is not created)."""
        return self.claim_name or self.generated_name
