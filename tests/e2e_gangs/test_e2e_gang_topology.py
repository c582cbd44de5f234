"""Multi-node jobs on a leaf–spine fabric land as the rules say, and placement strategies differ.

Fabric: 2 spines × 4 leaves × 4 DGX A100 nodes (32 nodes, 256 GPUs); leaves leaf-1…leaf-4 sit
under spine-1, leaf-5…leaf-8 under spine-2. Members ask for 8 GPUs (one node each).
"""

from __future__ import annotations

from tests.support.gang_cluster import GangCluster, gang_pod


async def test_2_4_8_16_node_jobs_take_one_leaf_a_whole_leaf_then_adjacent_leaves(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=2, leaves_per_spine=4, nodes_per_leaf=4)
    async with cluster.gang_coordinator():
        for size, leaves_expected in ((2, 1), (4, 1), (8, 2), (16, 4)):
            gang = f"job-{size}"
            for k in range(size):
                await cluster.create(gang_pod(f"{gang}-{k}", gang, size))
            placed = await cluster.all_bound(f"topos.io/gang={gang}", size)
            nodes = set(placed.values())
            leaves = sorted({cluster.leaf_of[n] for n in nodes}, key=lambda x: int(x[5:]))
            spines = {cluster.spine_of[n] for n in nodes}
            assert len(nodes) == size, placed
            assert len(leaves) == leaves_expected, (size, leaves)
            assert len(spines) == 1, (size, spines)  # never wider than needed
            numbers = [int(leaf[5:]) for leaf in leaves]
            assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # adjacent
            await cluster.delete_pods(f"topos.io/gang={gang}")
            await cluster.none_left(f"topos.io/gang={gang}")  # the job is done: room is free


async def test_consolidated_packs_a_job_onto_fewest_nodes_distributed_spreads_it(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with cluster.gang_coordinator():
        for k in range(4):
            await cluster.create(
                gang_pod(
                    f"train-{k}",
                    "train",
                    4,
                    gpus=2,
                    annotations={"topology.scheduler/placement-strategy": "consolidated"},
                )
            )
            await cluster.create(
                gang_pod(
                    f"serve-{k}",
                    "serve",
                    4,
                    gpus=2,
                    annotations={"topos.io/placement": "distributed"},
                )
            )
        train = await cluster.all_bound("topos.io/gang=train", 4)
        serve = await cluster.all_bound("topos.io/gang=serve", 4)
        assert len(set(train.values())) == 1  # 4 × 2 GPUs on one 8-GPU node
        assert len(set(serve.values())) == 4  # one replica per node, for fault tolerance
        assert len({cluster.leaf_of[n] for n in serve.values()}) == 2  # across leaves too
