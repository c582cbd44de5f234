"""Emptying an NVLink rack by moving a gang whole (``defragmentation.compactRacks``) on the real
control plane, where kube-controller-manager's Job controller recreates what is moved.

Two GB200 NVL72 racks of four trays (KWOK nodes, ``nvidia.com/gpu.clique``) in one leaf. A
young 2-tray gang — a Job whose ``podFailurePolicy`` ignores ``DisruptionTarget``, so that its
pods may move — runs in rack 1; two bare pods (never moved) hold two trays of rack 2. Each rack
is half used: 8 GPUs stranded in each. With ``compactRacks: true`` background compaction moves
the gang whole into rack 2's two free trays: its pods are evicted with ``Moved`` Events naming
the rack freed, the Job controller recreates them, and they bind in rack 2 — its two free trays
held for them meanwhile, so that a pod coming then goes to rack 1 rather than taking them
(without the hold it took one, and the gang went back to rack 1).
With ``compactRacks: false`` compaction runs and nothing moves.
"""

from __future__ import annotations

import time
from typing import Any

from coordinator.core.preemption.defrag import DefragSettings
from coordinator.engine.gangs.service import GangSettings
from devcluster import pods
from tests.support.gang_cluster import Controllers, GangCluster, gang_pod, hold_trays, two_racks
from tests.support.nvl72 import CLUSTER_UUID
from tests.support.polling import eventually
from tests.support.workloads import apply


def gang_job(name: str, size: int) -> dict[str, Any]:
    """A Job of ``size`` 4-GPU members of gang ``name`` that an eviction does not fail."""
    template = gang_pod(name, name, size, gpus=4, cpu="8", labels={"app": name})
    spec = {**template["spec"], "restartPolicy": "Never"}
    meta = {k: template["metadata"][k] for k in ("labels", "annotations")}
    policy = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": size,
            "completions": size,
            "backoffLimit": 0,  # an eviction counted as a failure would fail the Job at once
            "podFailurePolicy": policy,
            "template": {"metadata": meta, "spec": spec},
        },
    }


async def set_up(cluster: GangCluster) -> tuple[dict[str, int], dict[str, str]]:
    """The racks, the gang in rack 1 (both racks idle: the first clique by name), then the two
    bare pods on two trays of rack 2; node → rack, and the gang's pods → node."""
    rack_of = await two_racks(cluster)
    await apply(cluster, gang_job("train", 2))
    placed = await cluster.all_bound("app=train", 2, timeout_s=60)
    assert {rack_of[n] for n in placed.values()} == {1}, placed
    two = sorted(n for n, r in rack_of.items() if r == 2)
    await hold_trays(cluster, two[:2])
    return rack_of, placed


async def test_compact_racks_moves_a_young_gang_whole_into_the_other_rack_in_use(
    cluster: GangCluster,
) -> None:
    defrag = DefragSettings(mode="background", interval_s=1.0, compact_racks=True)
    settings = GangSettings(backoff_s=2.0, defrag=defrag)
    async with (
        Controllers(cluster, terminal_phase=True),
        cluster.gang_coordinator(gang_settings=settings),
    ):
        rack_of, before = await set_up(cluster)
        held = await cluster.placement("app=held")

        async def both_moved() -> list[Any] | None:
            found = await cluster.events(reason="Moved")
            return found if len(found) >= 2 else None

        moved = await eventually(both_moved, what="the Moved Events", timeout_s=60)
        assert {e["involvedObject"]["name"] for e in moved} == set(before)
        for e in moved:
            assert e["type"] == "Warning"
            assert e["message"].startswith(
                f"Moved by background compaction: compaction frees NVLink clique {CLUSTER_UUID}.1"
                " whole: moving 2 pods ("
            ), e["message"]
            assert "its controller recreates it (it fits on r2-t" in e["message"], e["message"]
        # a 4-GPU pod comes while the gang is being recreated: rack 2's two free trays are held
        # for the gang (a partly used rack is where this pod would go otherwise), so it goes to
        # rack 1, where the gang was
        await cluster.create(
            pods.pod("late", namespace=None, gpus=4, cpu="8", labels={"app": "late"})
        )
        # the Job controller made two new pods; the gang binds whole in rack 2's free trays
        try:
            after = await cluster.all_bound("app=train", 2, timeout_s=60)
        except AssertionError:
            for p in await cluster.pods():
                print("POD", p["metadata"]["name"], p["spec"].get("nodeName"), p.get("status"))
            for e in await cluster.events():
                print("EVENT", e["involvedObject"]["name"], e["reason"], e["message"])
            raise
        assert not set(after) & set(before)
        assert {rack_of[n] for n in after.values()} == {2}
        assert not set(after.values()) & set(held.values())
        assert await cluster.placement("app=held") == held  # bare pods never move
        (late,) = (await cluster.all_bound("app=late", 1)).values()
        assert rack_of[late] == 1


async def test_without_compact_racks_compaction_moves_nothing(cluster: GangCluster) -> None:
    defrag = DefragSettings(mode="background", interval_s=1.0, compact_racks=False)
    settings = GangSettings(backoff_s=2.0, defrag=defrag)
    async with Controllers(cluster), cluster.gang_coordinator(gang_settings=settings) as coord:
        _, before = await set_up(cluster)
        preemptor = coord.gangs.preemptor
        assert preemptor is not None
        # compaction looks (as its timer would, nothing waiting) and finds no node nor rack
        # it may empty: a tray freed alone in a rack still in use frees nothing. (The API shows
        # the last pod bound a moment before the scheduler has heard its bind answered.)
        queue = coord.runtime.scheduler.queue
        await eventually(lambda: queue.pending == 0, what="nothing pending in the queue")
        assert not preemptor.evicting
        assert preemptor.compact(time.monotonic()) is None
        assert preemptor.compactions == 0
        assert not await cluster.events(reason="Moved")
        assert await cluster.placement("app=train") == before
