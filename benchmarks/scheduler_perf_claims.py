"""scheduler_perf's ``allocResourceClaims`` op: allocate every ResourceClaim of a namespace in the
test itself, before any pod asks for it, so a workload starts with part of the devices in use
(upstream's SteadyStateClusterResourceClaimTemplate ``half`` and ``full`` workloads).

As upstream's ``allocResourceClaimsOp.run`` (``dra.go``, v1.36.3) does it: one claim at a time,
in the order listed, each on the first node of a fresh random shuffle of the nodes where the
structured allocator (here Topos' own, :func:`coordinator.core.dra.allocator.allocate` with
kube-scheduler's first-fit choice of devices) can allocate it, counting every claim allocated
so far in any namespace; a claim allocated already is left as it is; a claim no node can take
is an error naming it. Each allocation is written through the API into the claim's
``status.allocation`` (the status subresource, with the claim's ``resourceVersion``), as
upstream's ``UpdateStatus`` does: no finalizer and no ``reservedFor`` — the claims are
allocated, not in use by any pod. Nodes without a free device are left out of the shuffle
before it is drawn (they cannot take a claim of whole devices), which picks each node with the
same chance as upstream's walk over them all.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.scheduler_perf_objects import WorkloadError, known_keys
from common.kube import DEVICE_CLASSES, NODES, RESOURCE_CLAIMS, RESOURCE_SLICES, KubeClient
from coordinator.core.dra.allocator import AllocationFailure, FirstFit, allocate
from coordinator.core.dra.objects import DraObjectError
from coordinator.core.dra.state import (
    DraState,
    ResourceClaim,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from coordinator.engine.claimstatus import allocation_status

__all__ = ["AllocateClaims", "alloc_op", "allocate_claims", "plan_allocations"]

#: The keys of an ``allocResourceClaims`` op this runner reads (upstream's has no others).
KEYS = frozenset({"opcode", "namespace"})
WRITERS = 32


@dataclass(frozen=True, slots=True)
class AllocateClaims:
    """``allocResourceClaims``: allocate the claims of ``namespace``."""

    namespace: str


def alloc_op(op: Mapping[str, Any], where: str) -> AllocateClaims:
    known_keys(op, KEYS, "allocResourceClaims", where)
    namespace = op.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise WorkloadError(f"{where}.namespace: {namespace!r} is not a namespace")
    return AllocateClaims(namespace)


def _parsed(obj: ResourceClaim | DraObjectError | Any) -> Any:
    if isinstance(obj, DraObjectError):
        raise WorkloadError(f"allocResourceClaims: {obj}")
    return obj


def plan_allocations(
    namespace: str,
    nodes: Sequence[Mapping[str, Any]],
    slices: Sequence[Mapping[str, Any]],
    classes: Sequence[Mapping[str, Any]],
    claims: Sequence[Mapping[str, Any]],
    rng: random.Random,
) -> list[dict[str, Any]]:
    """The claims of ``namespace`` (objects as the API lists them, of every namespace) that are
    not allocated yet, each with the ``status.allocation`` chosen for it, in order."""
    state = DraState(
        [_parsed(parse_resource_slice(s)) for s in slices],
        [_parsed(parse_device_class(c)) for c in classes],
        [_parsed(parse_resource_claim(c)) for c in claims],
    )
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    names = sorted(labels)
    by_key = dict(state.claim_by_key)
    out: list[dict[str, Any]] = []
    for obj in claims:
        meta = obj["metadata"]
        if meta.get("namespace") != namespace or (obj.get("status") or {}).get("allocation"):
            continue
        claim = by_key[f"{namespace}/{meta['name']}"]
        free = state.nodes_with_free()
        why = "no node has a free device"
        for node in _shuffled([n for n in names if free is None or n in free], rng):
            found = allocate(state, [claim], node, labels[node], FirstFit())
            if isinstance(found, AllocationFailure):
                why = found.message
                continue
            status = {**(obj.get("status") or {}), "allocation": allocation_status(found[0])}
            body = {**obj, "status": status}
            out.append(body)
            by_key = {**by_key, claim.key: _parsed(parse_resource_claim(body))}
            state = state.with_claims(by_key, changed=(claim.key,))
            break
        else:
            raise WorkloadError(
                f"allocResourceClaims {namespace}: claim {meta['name']} fits no node "
                f"(of {len(names)}; {len(out)} allocated before it): {why}"
            )
    return out


def _shuffled(items: list[str], rng: random.Random) -> Iterator[str]:
    """``items`` in a random order, drawn one at a time (a shuffle's prefix, without shuffling
    the rest when the first fits)."""
    while items:
        i = rng.randrange(len(items))
        items[i], items[-1] = items[-1], items[i]
        yield items.pop()


async def allocate_claims(kube: KubeClient, op: AllocateClaims, rng: random.Random) -> int:
    """Allocate the namespace's claims (see the module); returns how many were written."""
    nodes, slices, classes, claims = [
        (await kube.list(r))["items"]
        for r in (NODES, RESOURCE_SLICES, DEVICE_CLASSES, RESOURCE_CLAIMS)
    ]
    bodies = await asyncio.to_thread(
        plan_allocations, op.namespace, nodes, slices, classes, claims, rng
    )
    sem = asyncio.Semaphore(WRITERS)

    async def write(body: dict[str, Any]) -> None:
        typed = {"apiVersion": RESOURCE_CLAIMS.api_version, "kind": "ResourceClaim", **body}
        async with sem:
            await kube.replace(
                RESOURCE_CLAIMS,
                body["metadata"]["name"],
                typed,
                namespace=op.namespace,
                subresource="status",
            )

    await asyncio.gather(*(write(b) for b in bodies))
    return len(bodies)
