"""A pod's Dynamic Resource Allocation references (``spec.resourceClaims``), the claims the
control plane made for it (``status.resourceClaimStatuses``, ``status.extendedResourceClaimStatus``)
and its per-container extended resources (which DRA may serve, KEP-5004)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.core.podspec.fields import FieldError, entry, mapping, sequence, text
from coordinator.core.podspec.resources import quantity

__all__ = ["ContainerExtended", "PodClaim", "container_extended", "extended_claim", "pod_claims"]


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


@dataclass(frozen=True, slots=True)
class ContainerExtended:
    """One extended resource one container requests: what a KEP-5004 claim request is made of.

    ``index`` counts init containers then containers; ``position`` is the resource's index among
    the container's sorted request names (kube-scheduler names the request
    ``container-<index>-request-<position>``)."""

    index: int
    container: str
    position: int
    resource: str
    count: int

    @property
    def request_name(self) -> str:
        return f"container-{self.index}-request-{self.position}"


def pod_claims(spec: Mapping[str, object], status: Mapping[str, object]) -> tuple[PodClaim, ...]:
    generated: dict[str, str] = {}
    for i, item in enumerate(sequence(status, "resourceClaimStatuses", "status")):
        p = f"status.resourceClaimStatuses[{i}]"
        e = entry(item, p)
        generated[text(e, "name", p)] = text(e, "resourceClaimName", p)
    out: list[PodClaim] = []
    seen: set[str] = set()
    for i, item in enumerate(sequence(spec, "resourceClaims", "spec")):
        p = f"spec.resourceClaims[{i}]"
        e = entry(item, p)
        name = text(e, "name", p)
        claim = text(e, "resourceClaimName", p)
        template = text(e, "resourceClaimTemplateName", p)
        if not name:
            raise FieldError(f"{p}.name", "must be set")
        if name in seen:
            raise FieldError(f"{p}.name", f"{name!r} appears twice")
        if bool(claim) == bool(template):
            raise FieldError(
                p, "must set exactly one of resourceClaimName and resourceClaimTemplateName"
            )
        seen.add(name)
        out.append(PodClaim(name, claim, template, generated.get(name, "") if template else ""))
    return tuple(out)


def extended_claim(status: Mapping[str, object]) -> str:
    raw = mapping(status, "extendedResourceClaimStatus", "status")
    return text(raw, "resourceClaimName", "status.extendedResourceClaimStatus")


def container_extended(spec: Mapping[str, object]) -> tuple[ContainerExtended, ...]:
    """Every extended resource (a name with a domain) each container requests."""
    out: list[ContainerExtended] = []
    containers = [
        *sequence(spec, "initContainers", "spec"),
        *sequence(spec, "containers", "spec"),
    ]
    for index, raw in enumerate(containers):
        if not isinstance(raw, Mapping):
            continue
        resources = raw.get("resources")
        if not isinstance(resources, Mapping):
            continue
        requests = resources.get("requests")
        limits = resources.get("limits")
        merged: dict[str, object] = dict(limits) if isinstance(limits, Mapping) else {}
        if isinstance(requests, Mapping):
            merged.update(requests)
        names = sorted(str(k) for k in merged)
        for position, name in enumerate(names):
            if "/" not in name or name.startswith("hugepages-"):
                continue
            try:
                count = quantity(name, merged[name])
            except ValueError:
                continue  # the resource parser reports bad quantities
            if count > 0:
                container = str(raw.get("name", ""))
                out.append(ContainerExtended(index, container, position, name, count))
    return tuple(out)
