"""A consolidated training gang takes the best GPU links on offer before packing, and says why.

Fleet: leaf-1 holds two 8-GPU L40S PCIe servers (``pcie-8x``: PIX pairs, NODE and SYS between
the rest); leaf-2 holds four idle DGX H100 (NVSwitch). A 4×4-GPU consolidated gang fits either
pair of machines; packing alone picked the PCIe leaf (first by name). It must land on NVSwitch.
"""

from __future__ import annotations

from tests.support.gang_cluster import LEAF, SPINE, GangCluster, gang_pod


async def test_a_consolidated_gang_takes_nvswitch_nodes_over_pcie_and_explains_it(
    cluster: GangCluster,
) -> None:
    pcie = [
        await cluster.add_node(f"l40s-{k}", "pcie-8x", labels_extra={LEAF: "leaf-1", SPINE: "s"})
        for k in range(2)
    ]
    nvswitch = [
        await cluster.add_node(f"h100-{k}", "dgx-h100", labels_extra={LEAF: "leaf-2", SPINE: "s"})
        for k in range(4)
    ]
    async with cluster.gang_coordinator() as coord:
        for k in range(4):
            await cluster.create(
                gang_pod(
                    f"train-{k}",
                    "train",
                    4,
                    gpus=4,
                    annotations={"topology.scheduler/placement-strategy": "consolidated"},
                )
            )
        placed = await cluster.all_bound("topos.io/gang=train", 4)
        event = await cluster.event("GangScheduled", name="train-0")
        (status,) = coord.gangs.step.manager.statuses()
    assert set(placed.values()) <= set(nvswitch), placed
    assert not set(placed.values()) & set(pcie)
    assert len(set(placed.values())) == 2  # still consolidated: 4 × 4 GPUs on two 8-GPU nodes
    why = (
        "leaf leaf-2 (2 nodes, consolidated); "
        "GPU links nvswitch: the best class on offer (pcie nodes passed over)"
    )
    assert event["message"] == f"pod group train: 4/4 members bound on {why}"
    # What GET /v1/gangs/{namespace}/train shows (message and placement).
    assert status.placement == why
    assert why in status.message
