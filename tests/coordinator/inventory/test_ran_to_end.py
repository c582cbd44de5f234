"""Which pod ends teach a run time (``Inventory.ran_to_end``, from the pod's last object): a pod
that Succeeded or Failed on its own ran to its end; one deleted, preempted or evicted did not."""

from __future__ import annotations

from typing import Any

from coordinator.inventory.state import BoundPod
from coordinator.inventory.store import Inventory
from coordinator.inventory.translate import ran_to_end


def obj(phase: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "uid": "u"}, "status": {"phase": phase, **status}}


def test_succeeded_or_failed_on_its_own_ran_to_its_end() -> None:
    assert ran_to_end(obj("Succeeded"))
    assert ran_to_end(obj("Failed", reason="Error"))
    assert not ran_to_end(obj("Running"))


def test_deleted_evicted_or_disrupted_did_not() -> None:
    deleted = obj("Succeeded")
    deleted["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    assert not ran_to_end(deleted)
    assert not ran_to_end(obj("Failed", reason="Evicted"))
    preempted = obj(
        "Failed",
        conditions=[
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        ],
    )
    assert not ran_to_end(preempted)


def test_the_inventory_remembers_which_pods_ran_to_their_end() -> None:
    inventory = Inventory()
    for uid in ("a", "b"):
        inventory.upsert_pod(
            BoundPod(uid=uid, namespace="ml", name=uid, node="n0", requests={"nvidia.com/gpu": 1})
        )
    inventory.delete_pod("a", ended=True)
    inventory.delete_pod("b")
    inventory.delete_pod("gone", ended=True)  # never bound here: nothing to remember
    assert inventory.ran_to_end("a")
    assert not inventory.ran_to_end("b")
    assert not inventory.ran_to_end("gone")
