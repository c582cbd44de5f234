"""Gangs deleted and run again, as everyone works: ``kubectl delete`` the Job, apply it again.

ISSUE12's reproductions on the real control plane: a bound 4-pod gang deleted and re-run under
the same pod names binds again, all together and promptly; re-run under new names (its old pods
still terminating) it binds all or nothing — never a partial count — and ``/v1/gangs`` shows the
new run only; neither is treated as a "recovery" of the old run. Also: members that disagree on
``gang-min`` say so and wait, and a released gang of bare pods keeps its bound member.

Fabric: one spine, two leaves of four DGX A100 nodes (8 GPUs each); members ask for 8 GPUs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest

from common.kube import PODS
from devcluster import pods
from devcluster.kube_wait import wait_for_pods
from tests.support.gang_cluster import Coordinator, GangCluster, gang_pod
from tests.support.polling import eventually

PROMPT_S = 15.0  # well under the 60 s unschedulable flush the old bookkeeping fell back on


def _never_partial(coord: Coordinator, seen: list[tuple[str, int, int, int]]) -> None:
    """Record every gang's (name, min, members, bound) the scheduler reports now."""
    for s in coord.gangs.step.manager.statuses():
        seen.append((s.name, s.min_member, s.members, s.bound))


def _no_recovery(coord: Coordinator) -> None:
    step = coord.gangs.step
    assert step.recoveries == []
    assert step.recovering == {}
    assert step.stats.recovered == 0


async def _bound_then_deleted(cluster: GangCluster, coord: Coordinator, owner: str | None) -> None:
    for k in range(4):
        await cluster.create(gang_pod(f"w-{k}", "train-1", 4, owner=owner))
    await cluster.all_bound("topos.io/gang=train-1", 4)
    await eventually(
        lambda: [(s.phase, s.bound) for s in coord.gangs.step.manager.statuses()] == [("Bound", 4)],
        what="the first run bound 4/4",
    )


@pytest.mark.parametrize("owned", [True, False], ids=["job", "bare-pods"])
async def test_a_gang_deleted_and_rerun_under_the_same_names_binds_again_together(
    cluster: GangCluster, owned: bool
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with cluster.gang_coordinator() as coord:
        await _bound_then_deleted(cluster, coord, await cluster.job("train-1") if owned else None)
        await cluster.delete_pods("topos.io/gang=train-1")
        await cluster.none_left("topos.io/gang=train-1")
        owner = await cluster.job("train-1") if owned else None
        started = time.monotonic()
        for k in range(4):
            await cluster.create(gang_pod(f"w-{k}", "train-1", 4, owner=owner))
        placed = await cluster.all_bound("topos.io/gang=train-1", 4, timeout_s=PROMPT_S)
        assert time.monotonic() - started < PROMPT_S
        assert [s.uid for s in coord.gangs.step.manager.statuses()] == [owner or ""]
        assert len(set(placed.values())) == 4
        await eventually(
            lambda: (
                [(s.phase, s.members, s.bound) for s in coord.gangs.step.manager.statuses()]
                == [("Bound", 4, 4)]
            ),
            what="/v1/gangs showing the re-run bound 4/4",
        )
        _no_recovery(coord)
        events = await cluster.events(reason="GangScheduled")
        assert not [e for e in events if "running again" in e["message"]]
        # Deleted for good: /v1/gangs forgets it (it kept "Bound 4/4" forever).
        await cluster.delete_pods("topos.io/gang=train-1")
        await eventually(
            lambda: coord.gangs.step.manager.statuses() == [],
            what="the deleted gang dropped from /v1/gangs",
            timeout_s=PROMPT_S,
        )


@pytest.mark.parametrize("owned", [True, False], ids=["job", "bare-pods"])
async def test_a_gang_rerun_under_new_names_binds_all_or_nothing_beside_its_old_run(
    cluster: GangCluster, owned: bool
) -> None:
    """The old run's pods are still terminating (a graceful delete no kubelet finishes here)
    when the new run's pods arrive: the new run never joins the old one's bound count."""
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with cluster.gang_coordinator() as coord:
        await _bound_then_deleted(cluster, coord, await cluster.job("train-1") if owned else None)
        for pod in await cluster.pods("topos.io/gang=train-1"):
            await cluster.kube.delete(PODS, pod["metadata"]["name"], namespace=cluster.namespace)
        owner = await cluster.job("train-1") if owned else None
        seen: list[tuple[str, int, int, int]] = []
        for k in range(3):
            await cluster.create(gang_pod(f"v-{k}", "train-1", 4, owner=owner))
        message = await cluster.condition("v-0", "waiting for all 4 pods to exist")
        assert message.startswith("waiting for pod group train-1: 0/4 members placed")
        _never_partial(coord, seen)
        news = {f"v-{k}": None for k in range(3)}
        placement = await cluster.placement("topos.io/gang=train-1")
        assert {k: v for k, v in placement.items() if k.startswith("v-")} == news  # none bound
        await eventually(  # the new run only: the old run ends with its last terminating member
            lambda: (
                [(s.phase, s.members, s.bound) for s in coord.gangs.step.manager.statuses()]
                == [("Pending", 3, 0)]
            ),
            what="/v1/gangs showing the new run only, 3 of 4 members",
            timeout_s=2,
        )
        await cluster.create(gang_pod("v-3", "train-1", 4, owner=owner))

        def new_run_bound(pods: Sequence[dict[str, Any]]) -> dict[str, str] | None:
            _never_partial(coord, seen)
            new = {
                p["metadata"]["name"]: p["spec"].get("nodeName")
                for p in pods
                if p["metadata"]["name"].startswith("v-")
            }
            if len(new) == 4 and all(new.values()):
                return {k: str(v) for k, v in new.items()}
            return None

        placed = await wait_for_pods(
            cluster.kube,
            cluster.namespace,
            new_run_bound,
            label_selector="topos.io/gang=train-1",
            timeout_s=PROMPT_S,
            what="the new run's 4 members bound",
        )
        assert len(set(placed.values())) == 4
        # Never a partial count, never more bound than exist.
        assert all(b <= m and (b == 0 or m >= n) for _, n, m, b in seen), seen
        await eventually(
            lambda: (
                [(s.phase, s.members, s.bound) for s in coord.gangs.step.manager.statuses()]
                == [("Bound", 4, 4)]
            ),
            what="/v1/gangs showing the new run only, bound 4/4",
        )
        assert [s.uid for s in coord.gangs.step.manager.statuses()] == [owner or ""]
        _no_recovery(coord)


async def test_members_that_disagree_on_gang_min_say_so_and_wait_until_they_agree(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with cluster.gang_coordinator():
        await cluster.create(gang_pod("w-0", "train-1", 2))
        for k in (1, 2):
            await cluster.create(gang_pod(f"w-{k}", "train-1", 3))
        expected = (
            "pod group train-1: members disagree on the minimum: 2 (w-0) and 3 (w-1, w-2); "
            "none binds until they agree"
        )
        assert await cluster.condition("w-1", "(w-1, w-2)") == expected

        async def told() -> list[tuple[str, str]]:
            events = await cluster.events(name="w-0", reason="FailedScheduling")
            return [(e["type"], e["message"]) for e in events if e["message"] == expected]

        assert (await eventually(told, what="w-0 told why"))[0][0] == "Warning"
        assert all(n is None for n in (await cluster.placement("topos.io/gang")).values())
        await cluster.delete_pods("topos.io/gang-min=2")  # fixed: applied again with 3
        await cluster.none_left("topos.io/gang-min=2")
        await cluster.create(gang_pod("w-0", "train-1", 3))
        await cluster.all_bound("topos.io/gang=train-1", 3, timeout_s=PROMPT_S)


async def test_a_released_gang_of_bare_pods_keeps_its_bound_member(cluster: GangCluster) -> None:
    """A crash left 1 of 2 bare members bound and the other cannot fit now: the bound one is not
    evicted (nothing would create it again, and its sibling would wait forever for it)."""
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    await cluster.create(gang_pod("w-0", "pair", 2))
    await cluster.create(gang_pod("w-1", "pair", 2, gpus=16))  # no node has 16 GPUs
    await cluster.kube.bind(namespace=cluster.namespace, pod="w-0", node=nodes[0])
    async with cluster.gang_coordinator() as coord:
        event = await cluster.event("GangMemberKept", name="w-0")
        assert "no controller" in event["message"]
        assert event["type"] == "Warning"
        message = await cluster.condition("w-1", "pair")
        assert "1/2 members placed" in message
        await coord.runtime.scheduler.drain()
        w0 = await cluster.pod("w-0")
        assert w0["spec"]["nodeName"] == nodes[0]
        assert not w0["metadata"].get("deletionTimestamp")
        assert not await cluster.events(name="w-0", reason="GangReleased")


async def test_a_gang_that_lost_the_race_for_room_binds_as_soon_as_room_frees(
    cluster: GangCluster,
) -> None:
    """ISSUE12 item 7: room freed a moment after a gang's attempt began (or while it was being
    decided) sends the gang back to be tried again; it never sits out the 60 s flush."""
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with cluster.gang_coordinator():
        for round_no, delay_s in enumerate((0.0, 0.05, 0.1, 0.3)):
            blocker = pods.pod(
                f"blocker-{round_no}",
                namespace=None,
                gpus=8,
                node=nodes[round_no % 2],  # already running there
                labels={"e2e/role": "blocker"},
            )
            await cluster.create(blocker)
            gang = f"race-{round_no}"
            for k in range(2):
                await cluster.create(gang_pod(f"{gang}-{k}", gang, 2))
            await asyncio.sleep(delay_s)
            started = time.monotonic()
            await cluster.delete_pods("e2e/role=blocker")
            await cluster.all_bound(f"topos.io/gang={gang}", 2, timeout_s=PROMPT_S)
            assert time.monotonic() - started < PROMPT_S, (round_no, delay_s)
            await cluster.delete_pods(f"topos.io/gang={gang}")
            await cluster.none_left(f"topos.io/gang={gang}")
