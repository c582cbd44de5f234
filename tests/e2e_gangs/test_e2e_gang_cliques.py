"""Multi-tray gangs on GB200 NVL72 racks (real control plane): one NVLink clique when it fits,
a degraded tray avoided, and the Event and ``/v1/gangs`` name the clique.

Fleet: two racks of 18 ``gb200-nvl72`` trays (4 GPUs each) in one leaf, each rack its own clique
(``nvidia.com/gpu.clique``, GFD's ``<clusterUUID>.<cliqueId>``); tray 3 of rack 1 reports its
NVLink fabric degraded. Members ask for a whole tray (4 GPUs).
"""

from __future__ import annotations

import asyncio

from tests.support.gang_cluster import LEAF, SPINE, GangCluster, gang_pod
from tests.support.nvl72 import CLUSTER_UUID

CLIQUE = "nvidia.com/gpu.clique"


async def test_an_18_tray_gang_takes_a_whole_rack_and_a_degraded_tray_is_avoided(
    cluster: GangCluster,
) -> None:
    slots = asyncio.Semaphore(8)
    rack_of: dict[str, int] = {}

    async def tray(rack: int, i: int) -> None:
        labels = {LEAF: "leaf-1", SPINE: "spine-1", CLIQUE: f"{CLUSTER_UUID}.{rack}"}
        if (rack, i) == (1, 3):
            labels["topos.io/gpu.fabric"] = "degraded"
        async with slots:
            name = await cluster.add_node(f"r{rack}-t{i:02d}", "gb200-nvl72", labels_extra=labels)
        rack_of[name] = rack

    await asyncio.gather(*(tray(r, i) for r in (1, 2) for i in range(1, 19)))
    degraded = next(n for n in rack_of if n.startswith("r1-t03-"))

    async def gang(name: str, size: int) -> dict[str, str]:
        for k in range(size):
            await cluster.create(gang_pod(f"{name}-{k}", name, size, gpus=4, cpu="8"))
        return await cluster.all_bound(f"topos.io/gang={name}", size)

    async with cluster.gang_coordinator() as coord:
        # 4 trays taken: the rack with fewer healthy trays is the tighter fit
        small = await gang("small", 4)
        assert {rack_of[n] for n in small.values()} == {1}
        # 18 trays: rack 1 has 13 left, so the whole of rack 2 — not 13 + 5 across racks
        big = await gang("big", 18)
        assert {rack_of[n] for n in big.values()} == {2}
        assert len(set(big.values())) == 18
        event = await cluster.event("GangScheduled", name="big-0")
        statuses = {s.name: s for s in coord.gangs.step.manager.statuses()}
        # 13 trays: rack 1's 13 healthy free trays, never the degraded one
        rest = await gang("rest", 13)
        assert {rack_of[n] for n in rest.values()} == {1}
        assert degraded not in set(rest.values()) | set(small.values())
    why = (
        f"clique {CLUSTER_UUID}.2 (18 nodes, balanced); "
        "inside one NVLink clique (nvidia.com/gpu.clique): 1 of 2 cliques could hold the group"
    )
    assert event["message"] == f"pod group big: 18/18 members bound on {why}"
    assert statuses["big"].placement == why  # GET /v1/gangs/{namespace}/big
