"""Which gang a queued pod is in (``GangMembership.spec_of``), read from the request the queue
parsed when the pod declares none: a pod in no gang is no member, a pod naming a gang is one,
and a pod edited into a gang (its object changed, the request parsed again) is read again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.core.gangs.identity import GangProblem, GangSpec
from coordinator.core.podspec.parse import PodSpecError, parse_pod
from coordinator.core.queue import QueuedPod
from coordinator.engine.gangs.service import GangRuntime
from coordinator.inventory.store import Inventory
from devcluster.pods import pod


def queued(obj: dict[str, Any]) -> QueuedPod:
    meta = obj["metadata"]
    return QueuedPod(
        key=f"{meta['namespace']}/{meta['name']}",
        uid=meta["uid"],
        obj=obj,
        request=parse_pod(obj),
        created="",
        seq=1,
    )


@pytest.fixture
async def gangs() -> AsyncIterator[GangRuntime]:
    inventory = Inventory(stale_ttl_s=3600)
    runtime = memory_runtime(inventory, MemoryCluster(inventory))
    async with runtime, GangRuntime(runtime) as gangs:
        yield gangs


async def test_a_pod_in_no_gang_is_no_member_and_one_edited_into_a_gang_is(
    gangs: GangRuntime,
) -> None:
    membership = gangs.step.membership
    bare = pod("p", namespace="ml", uid="uid-p")
    assert membership.spec_of(queued(bare)) is None
    joined = pod("p", namespace="ml", uid="uid-p", gang=("g", 2))
    spec = membership.spec_of(queued(joined))
    assert isinstance(spec, GangSpec)
    assert (spec.key.namespace, spec.key.name, spec.min_member) == ("ml", "g", 2)
    assert membership.spec_of(queued(bare)) is None  # left it again: no stale answer


async def test_a_pod_whose_gang_keys_are_wrong_is_a_problem_not_a_pod_in_no_gang(
    gangs: GangRuntime,
) -> None:
    bad = pod("q", namespace="ml", uid="uid-q", gang=("g", 2))
    bad["metadata"]["labels"]["topos.io/gang-min"] = "many"
    entry = queued(bad)
    assert isinstance(entry.request, PodSpecError)  # nothing parsed to read the gang from
    problem = gangs.step.membership.spec_of(entry)
    assert isinstance(problem, GangProblem)
    assert "topos.io/gang-min" in problem.message
