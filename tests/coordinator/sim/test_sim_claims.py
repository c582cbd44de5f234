"""The simulator's policies hand back the DRA claims a decision allocated, and its replay holds
them: a device one pod's claim got is never given to the next pod's claim."""

from __future__ import annotations

from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.sim import make_policy
from tests.coordinator.core.dra.dra_objects import claim, claim_pod, exactly, gpu_slice, state
from tests.support.sched_hw import dgx1, plain_node, request


def test_claims_placed_one_after_another_get_different_devices() -> None:
    # No agent on the node: only the assumed claims say which devices are taken.
    claims = [claim(f"c{i}", [exactly("gpus", 4)]) for i in range(3)]
    snapshot = Snapshot([plain_node("d")], dra=state([gpu_slice("d", dgx1("d"))], claims=claims))
    policy = make_policy("topos")
    taken: list[set[str]] = []
    for i in range(2):
        slots = policy.place([request(claim_pod(f"p{i}", f"c{i}"))], snapshot)
        assert not isinstance(slots, str), slots
        (slot,) = slots
        snapshot.assume(slot.pod, slot.node, slot.placement, slot.claims)  # as the replay does
        taken.append({r.device.device for a in slot.claims for r in a.results})
    assert len(taken[0]) == len(taken[1]) == 4
    assert not taken[0] & taken[1]
    assert isinstance(policy.place([request(claim_pod("p2", "c2"))], snapshot), str)
