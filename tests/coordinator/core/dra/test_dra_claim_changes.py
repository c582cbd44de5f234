"""A claim change builds the next DraState on the last one (:meth:`DraState.with_claims`), counting
only the claims that changed: what the claims hold must be what a state built from scratch
counts (and the nodes holding them), through allocations, releases, deletions and a device two
claims name."""

from __future__ import annotations

from typing import Any

from coordinator.core.dra.state import DraState, ResourceClaim, parse_resource_claim
from tests.coordinator.core.dra.dra_objects import claim, exactly, gpu_slice, state
from tests.support.dra import allocated_on
from tests.support.sched_hw import dgx1


def parsed(obj: dict[str, Any]) -> ResourceClaim:
    out = parse_resource_claim(obj)
    assert isinstance(out, ResourceClaim), out
    return out


def held_on(name: str, *devices: str) -> ResourceClaim:
    return parsed(
        claim(name, [exactly("gpus", len(devices))], allocation=allocated_on("d", devices))
    )


def free(name: str) -> ResourceClaim:
    return parsed(claim(name, [exactly("gpus", 1)]))


def test_each_claim_change_counts_what_a_fresh_state_counts() -> None:
    base = state([gpu_slice("d", dgx1("d"))])
    # unchanged claims keep their object from one state to the next, as in the store
    a0, a1, b0, b1 = free("a"), held_on("a", "gpu-0"), free("b"), held_on("b", "gpu-1", "gpu-2")
    c, e = held_on("c", "gpu-1"), held_on("e", "gpu-7")
    steps: list[dict[str, ResourceClaim]] = [
        {"default/a": a0, "default/b": b0},
        {"default/a": a1, "default/b": b0},  # allocated
        {"default/a": a1, "default/b": b1},
        {"default/a": a0, "default/b": b1},  # released
        {"default/b": b1},  # deleted
        # two claims name gpu-1 (a stale write): releasing one must not free it
        {"default/b": b1, "default/c": c},
        {"default/c": c},
        {"default/c": c, "default/e": e},
        {"default/e": e},
        {},
    ]
    current = base
    for i, claims in enumerate(steps):
        current = current.with_claims(dict(claims))
        fresh = DraState(base.slices, base.classes, claims.values())
        assert (current.allocated, current.held, current.consumed) == (
            fresh.allocated,
            fresh.held,
            fresh.consumed,
        ), f"step {i}"
        holding = frozenset({"d"} if fresh.held else ())
        assert current.nodes_holding() == fresh.nodes_holding() == holding, f"step {i}"
    assert current.allocated == frozenset()
    assert base.with_claims({"default/x": held_on("x", "gpu-3")}).allocated == frozenset(
        d.id for d in base.usable_devices() if d.id.device == "gpu-3"
    )
