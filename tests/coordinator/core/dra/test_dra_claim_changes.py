"""A claim change builds the next DraState on the last one (:meth:`DraState.with_claims`), counting
only the claims that changed: what the claims hold must be what a state built from scratch
counts (and the nodes holding them), through allocations, releases, deletions and a device two
claims name."""

from __future__ import annotations

from typing import Any

from coordinator.core.dra.state import DraState, ResourceClaim, parse_resource_claim
from tests.coordinator.core.dra.dra_objects import claim, exactly, gpu_slice, state
from tests.support.dra import allocated_on, claim_allocation
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


def on(node: str, name: str, *devices: str) -> dict[str, Any]:
    return claim(name, [exactly("gpus", len(devices))], allocation=allocated_on(node, devices))


def test_free_devices_per_node_follow_claims_and_allocations_in_flight() -> None:
    """What a node's devices no claim holds whole are (the allocator's walk) and which nodes
    have one (the nodes a pod with a claim is tried on) are carried from state to state, and
    from a state with allocations in flight back to the one it is made from, for the nodes the
    change does not touch: each must be what a state built from scratch says."""
    base = state([gpu_slice("a", dgx1("a")), gpu_slice("b", dgx1("b"))])
    all_a = [f"gpu-{i}" for i in range(8)]
    x, y = claim("x", [exactly("gpus", 1)]), claim("y", [exactly("gpus", 2)])
    x_a, y_b, x_all = on("a", "x", "gpu-0"), on("b", "y", "gpu-0", "gpu-1"), on("a", "x", *all_a)
    steps: list[tuple[list[dict[str, Any]], list[tuple[dict[str, Any], str, list[str]]]]] = [
        ([x], [(x, "a", ["gpu-0"])]),  # a bind in flight
        ([x_a], [(y, "b", ["gpu-0", "gpu-1"])]),  # seen on the watch; another in flight
        ([x_a, y_b], []),
        ([x_all, y_b], []),  # a full: only b has a free device
        ([x_all], [(y, "a", ["gpu-3"])]),  # (a stale choice: the device is held already)
        ([], []),  # released
    ]

    def expect(st: DraState, fresh: DraState, step: str) -> None:
        for node in ("a", "b"):
            got = [d.id for d in st.free_on(node, {})]
            want = [d.id for d in fresh.devices_on(node, {}) if d.id not in fresh.allocated]
            assert got == want, f"{step}: node {node}"
        assert st.nodes_with_free() == fresh.nodes_with_free(), step

    current = base
    for i, (claims, in_flight) in enumerate(steps):
        parsed_claims = {f"default/{c['metadata']['name']}": parsed(c) for c in claims}
        current = current.with_claims(dict(parsed_claims))
        fresh = DraState(base.slices, base.classes, parsed_claims.values())
        allocations = [claim_allocation(c, node, *devices) for c, node, devices in in_flight]
        view = current.with_allocations(allocations)
        held = dict(parsed_claims)
        for c, node, devices in in_flight:
            held[f"default/{c['metadata']['name']}"] = parsed(on(node, "_", *devices))
        expect(view, DraState(base.slices, base.classes, held.values()), f"step {i}, in flight")
        expect(current, fresh, f"step {i}")  # after the view wrote what it found back
    assert current.nodes_with_free() == frozenset({"a", "b"})
    full = base.with_claims({"default/x": parsed(x_all)})
    assert full.nodes_with_free() == frozenset({"b"})
    assert full.free_on("a", {}) == ()
