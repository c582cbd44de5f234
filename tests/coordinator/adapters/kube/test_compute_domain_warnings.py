"""A ComputeDomain placement cannot read gets one Warning Event per problem, naming the field and
the value, on the ComputeDomain itself; a good one, or the same problem seen again, gets none.
(The Event as the API server stores it: tests/e2e_gangs/test_e2e_gang_cliques.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

from common.kube.types import ObjectReference
from coordinator.adapters.kube.domainwarnings import REASON, ComputeDomainWarnings
from coordinator.inventory.dra import DraStore


class Recorder:
    """Stands in for :class:`EventRecorder`: what would be posted."""

    def __init__(self) -> None:
        self.posted: list[tuple[ObjectReference, str, str, str]] = []

    async def record(
        self, regarding: ObjectReference, *, reason: str, message: str, event_type: str, **_: Any
    ) -> None:
        self.posted.append((regarding, reason, message, event_type))


def domain(name: str, nodes: object, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta = {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": labels or {}}
    return {"metadata": meta, "spec": {"numNodes": nodes}}


async def test_one_warning_per_problem_on_the_compute_domain() -> None:
    store = DraStore()
    recorder = Recorder()
    events: Any = recorder  # duck-typed: only record() is called
    warnings = ComputeDomainWarnings(store, events, instance="topos-0")
    store.subscribe(warnings)

    store.apply("ComputeDomain", "ml/good", domain("good", 4))
    store.apply("ComputeDomain", "ml/bad", domain("bad", -2))
    store.apply("ComputeDomain", "ml/bad", domain("bad", -2, labels={"a": "b"}))  # same problem
    await asyncio.gather(*warnings._writes)  # the posts run off the watch's call
    assert len(recorder.posted) == 1
    regarding, reason, message, kind = recorder.posted[0]
    assert regarding == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "name": "bad",
        "namespace": "ml",
        "uid": "uid-bad",
    }
    assert (reason, kind) == (REASON, "Warning")
    assert message.startswith("spec.numNodes: -2 is not a number of nodes (0 or more); ")

    store.apply("ComputeDomain", "ml/bad", domain("bad", "two"))  # another problem: told
    store.apply("ComputeDomain", "ml/bad", domain("bad", 2))  # fixed: nothing
    store.apply("ComputeDomain", "ml/bad", domain("bad", -2))  # broken again: told again
    await asyncio.gather(*warnings._writes)
    told = [m for _, _, m, _ in recorder.posted]
    assert told[1].startswith("spec.numNodes: 'two' is not a number of nodes")
    assert told[2].startswith("spec.numNodes: -2 ")
    assert len(told) == 3
