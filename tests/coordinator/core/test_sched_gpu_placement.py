"""Which node and which GPUs a GPU pod gets: link classes, anti-fragmentation, locality,
per-GPU memory, MIG instances, unhealthy GPUs, nodes without an agent, and that no GPU is ever
handed out twice."""

from __future__ import annotations

import itertools

import pytest

from common.labeling import labels
from common.model import worst_link
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.plugins.gpuchoice import topology_index
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod
from tests.support.sched_hw import (
    a100_mig,
    dgx1,
    dgx_h100,
    gpu_node,
    pcie8,
    place_all,
    plain_node,
    request,
    run,
    topology,
    ws4,
)

QUAD_A, QUAD_B = {0, 1, 2, 3}, {4, 5, 6, 7}


def gpus_of(result: object) -> set[int]:
    assert isinstance(result, Decision), getattr(result, "message", result)
    return set(result.placement.gpus)


def test_dgx1_four_gpu_pod_gets_a_fully_connected_quad() -> None:
    got = gpus_of(run(pod("p", gpus=4), [gpu_node("d", dgx1("d"))]))
    assert got in (QUAD_A, QUAD_B)


def test_dgx1_one_gpu_pods_fill_one_quad_before_breaking_the_other() -> None:
    snapshot = Snapshot([gpu_node("d", dgx1("d"))])
    results = place_all([pod(f"p{i}", gpus=1) for i in range(4)], snapshot)
    used = set().union(*(gpus_of(r) for r in results))
    assert used in (QUAD_A, QUAD_B)
    # …so a 4-GPU pod still finds an intact quad afterwards.
    four = schedule_one(pod("big", gpus=4), snapshot, build_framework())
    assert gpus_of(four) == ({0, 1, 2, 3, 4, 5, 6, 7} - used)


def test_dgx1_two_gpu_pod_takes_a_double_nvlink_pair_inside_a_quad() -> None:
    topo = dgx1("d")
    got = sorted(gpus_of(run(pod("p", gpus=2), [gpu_node("d", topo)])))
    assert str(topo.link(*got)) == "NV2"
    assert set(got) <= QUAD_A or set(got) <= QUAD_B


def test_pcie_box_two_gpus_from_one_switch_before_crossing_sockets() -> None:
    topo = pcie8("p")
    snapshot = Snapshot([gpu_node("p", topo)])
    results = place_all([pod(f"p{i}", gpus=2) for i in range(4)], snapshot)
    for r in results:
        a, b = sorted(gpus_of(r))
        assert str(topo.link(a, b)) == "PIX"
    # With one GPU of switch (0,1) busy, a 2-GPU pod avoids the broken pair.
    snapshot = Snapshot([gpu_node("p", topo)])
    place_all([pod("single", gpus=1)], snapshot)
    pair = gpus_of(schedule_one(pod("pair", gpus=2), snapshot, build_framework()))
    assert str(topo.link(*sorted(pair))) == "PIX"


def test_best_node_is_the_one_with_the_better_link_class() -> None:
    nodes = [gpu_node("pcie", pcie8("pcie")), gpu_node("nvsw", dgx_h100("nvsw"))]
    result = run(pod("p", gpus=4), nodes)
    assert isinstance(result, Decision)
    assert result.node == "nvsw"
    assert result.verdicts["pcie"].scores["GpuTopology"] < result.breakdown["GpuTopology"]


@pytest.mark.parametrize(
    ("busy", "count", "locality", "expect_fit"),
    [
        ((0, 2), 2, "nvlink", True),  # (1,3) are NVLinked in the quad
        ((0, 1, 2, 4, 5, 6), 2, "nvlink", False),  # 3 and 7 are joined by SYS only
        ((0, 1, 2, 4, 5, 6), 2, "any", True),
        ((0, 1, 2, 4, 5, 6), 2, "same-socket", False),  # 3 on socket 0, 7 on socket 1
        ((), 5, "nvlink", False),  # no 5-GPU NVLink clique on a cube-mesh
        ((), 5, "same-node", True),
    ],
)
def test_locality_policies_on_dgx1(
    busy: tuple[int, ...], count: int, locality: str, expect_fit: bool
) -> None:
    from tests.support.sched_hw import running

    holder = pod("holder", gpus=len(busy)) if busy else None
    pods = [running(holder, gpus=busy)] if holder else []
    node = gpu_node("d", dgx1("d"), pods=pods)
    obj = pod("p", gpus=count, annotations={"topos.io/gpu-locality": locality})
    result = run(obj, [node])
    assert isinstance(result, Decision) is expect_fit
    if expect_fit:
        assert set(result.placement.gpus).isdisjoint(busy)
    else:
        assert isinstance(result, Failure)
        expected = {
            "nvlink": "node(s) had no free GPUs joined by NVLink",
            "same-socket": "node(s) had no free GPUs on one socket",
        }[locality]
        assert result.statuses["d"].reasons == (expected,)


def test_same_socket_uses_the_numa_node_of_each_gpu() -> None:
    obj = pod("p", gpus=4, annotations={"topos.io/gpu-locality": "same-socket"})
    got = gpus_of(run(obj, [gpu_node("p", pcie8("p"))]))
    assert got in ({0, 1, 2, 3}, {4, 5, 6, 7})


def test_workstation_pairs_by_nvlink_bridge() -> None:
    snapshot = Snapshot([gpu_node("ws", ws4("ws"))])
    first, second = place_all([pod("a", gpus=2), pod("b", gpus=2)], snapshot)
    assert {frozenset(gpus_of(first)), frozenset(gpus_of(second))} == {
        frozenset({0, 1}),
        frozenset({2, 3}),
    }


def test_gpu_product_selection_by_our_label_and_gfd_label() -> None:
    nodes = [gpu_node("l40s", pcie8("l40s")), gpu_node("h100", dgx_h100("h100"))]
    for key in ("topos.io/gpu.product", "nvidia.com/gpu.product"):
        obj = pod("p", gpus=1, spec={"nodeSelector": {key: "NVIDIA-L40S"}})
        result = run(obj, nodes)
        assert isinstance(result, Decision)
        assert result.node == "l40s"


def test_per_gpu_memory_minimum() -> None:
    nodes = [gpu_node("small", pcie8("small", memory_mib=24576)), gpu_node("big", dgx_h100("big"))]
    obj = pod("p", gpus=1, annotations={"topos.io/gpu-memory-min": "40Gi"})
    result = run(obj, nodes)
    assert isinstance(result, Decision)
    assert result.node == "big"
    assert result.verdicts["small"].status.reasons == (
        "node(s) had no free GPU with enough memory",
    )
    # A bare number is MiB.
    obj = pod("p", gpus=1, annotations={"topos.io/gpu-memory-min": "20000"})
    assert run(obj, nodes[:1]).node == "small"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("reported_mib", "size"),
    [(81559, "80Gi"), (81920, "80Gi"), (40960, "40Gi"), (46068, "45Gi"), (23040, "23Gi")],
)
def test_a_gpu_is_its_size_class_for_the_label_and_the_memory_minimum(
    reported_mib: int, size: str
) -> None:
    # An "H100 80GB" reports 81,559 MiB (< 80 GiB): it is labelled 80Gi, and a pod selecting
    # that label and asking 80Gi of every GPU (seed 000's gpuRequirements.memory) fits it.
    topo = pcie8("n", memory_mib=reported_mib)
    labelled = labels(topo).labels
    assert labelled["neuronetes.io/gpu-memory"] == size
    node = gpu_node("n", topo, labels=labelled)
    selector = {"nodeSelector": {"neuronetes.io/gpu-memory": size}}
    obj = pod("p", gpus=1, annotations={"topos.io/gpu-memory-min": size}, spec=selector)
    result = run(obj, [node])
    assert isinstance(result, Decision), result.message  # type: ignore[union-attr]
    # The next class up is more than the GPU has.
    bigger = f"{int(size[:-2]) + 1}Gi"
    refused = run(pod("p", gpus=1, annotations={"topos.io/gpu-memory-min": bigger}), [node])
    assert isinstance(refused, Failure)


def test_mig_profile_resource_fits_only_a_gpu_with_that_instance_free() -> None:
    topo = a100_mig("m")
    snapshot = Snapshot([gpu_node("m", topo), gpu_node("h", dgx_h100("h"))])
    obj = lambda i: pod(f"mig{i}", cpu="1")  # noqa: E731
    pods = []
    for i in range(8):
        p = obj(i)
        p["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
        pods.append(p)
    results = place_all(pods, snapshot)
    decided = [r for r in results if isinstance(r, Decision)]
    assert len(decided) == 7  # GPU 0 has seven 1g.10gb instances
    assert all(r.node == "m" for r in decided)
    assert len({r.placement.mig for r in decided}) == 7
    assert {g for r in decided for g, _ in r.placement.mig} == {0}
    assert decided[0].device_ids[0].startswith("MIG-m-0-")
    last = results[-1]
    assert isinstance(last, Failure)
    assert last.statuses["m"].reasons == ("Insufficient nvidia.com/mig-1g.10gb",)
    assert last.statuses["h"].reasons == ("Insufficient nvidia.com/mig-1g.10gb",)


SINGLE = {"nvidia.com/mig.strategy": "single"}


def test_mig_profile_annotation_single_strategy() -> None:
    topo = a100_mig("m")
    obj = pod("p", gpus=1, annotations={"topos.io/mig-profile": "3g.40gb"})
    result = run(obj, [gpu_node("m", topo, gpus=12, labels=SINGLE)])
    assert isinstance(result, Decision)
    assert result.placement.gpus == ()
    assert result.placement.mig in (((1, 1),), ((1, 2),))
    missing = pod("p", gpus=1, annotations={"topos.io/mig-profile": "2g.20gb"})
    failure = run(missing, [gpu_node("m", topo, gpus=12, labels=SINGLE)])
    assert isinstance(failure, Failure)
    assert failure.statuses["m"].reasons == (
        "node(s) had no free MIG instance of the requested profile",
    )


def test_mig_profile_annotation_on_a_mixed_strategy_node_says_what_to_ask_for() -> None:
    # Under the mixed strategy nvidia.com/gpu is a whole GPU: the kubelet would never hand this
    # pod a MIG instance, even where whole GPUs are free (GPUs 2-7 here).
    topo = a100_mig("m")
    obj = pod("p", gpus=1, annotations={"topos.io/mig-profile": "1g.10gb"})
    for node in (
        gpu_node("m", topo),
        gpu_node("m", topo, labels={"nvidia.com/mig.strategy": "mixed"}),
    ):
        failure = run(obj, [node])
        assert isinstance(failure, Failure)
        assert failure.unresolvable
        assert failure.message == (
            "0/1 nodes are available: 1 node(s) run the mixed MIG strategy, where nvidia.com/gpu"
            " is a whole GPU: request nvidia.com/mig-1g.10gb: 1 instead of nvidia.com/gpu with"
            " topos.io/mig-profile."
        )
    # Asked for as the message says, the same pod gets a 1g.10gb instance there.
    fixed = pod("p", cpu="1", annotations={"topos.io/mig-profile": "1g.10gb"})
    fixed["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
    result = run(fixed, [gpu_node("m", topo)])
    assert isinstance(result, Decision)
    assert result.placement.gpus == ()
    assert [g for g, _ in result.placement.mig] == [0]


def test_whole_gpu_pods_never_get_mig_partitioned_or_unhealthy_gpus() -> None:
    topo = a100_mig("m")  # GPUs 0 and 1 are partitioned
    result = run(pod("p", gpus=6), [gpu_node("m", topo)])
    assert gpus_of(result) == {2, 3, 4, 5, 6, 7}
    sick = topology(
        "s",
        links=[["X", "NV4"], ["NV4", "X"]],
        product="A",
        memory_mib=1000,
        gpu_numa=[0, 0],
        numa=dgx1("x").numa_nodes[:1],
        unhealthy=[0],
    )
    assert gpus_of(run(pod("p", gpus=1), [gpu_node("s", sick)])) == {1}
    too_many = run(pod("p", gpus=2), [gpu_node("s", sick)])
    assert isinstance(too_many, Failure)
    assert too_many.statuses["s"].reasons == ("Insufficient nvidia.com/gpu",)


def test_node_without_topology_takes_cpu_pods_but_never_a_gpu_pod_blind() -> None:
    bare = plain_node("bare", gpus=8)
    assert isinstance(run(pod("p", cpu="4"), [bare]), Decision)
    for gpu_pod in (
        pod("p", gpus=4),
        pod("p", gpus=4, annotations={"topos.io/gpu-locality": "nvlink"}),
    ):
        failure = run(gpu_pod, [bare])
        assert isinstance(failure, Failure)
        assert failure.message == (
            "0/1 nodes are available: 1 node(s) had no GPU topology from a Topos agent yet."
        )
    numa = pod("p", cpu="4", annotations={"topos.io/numa-policy": "single-numa"})
    failure = run(numa, [bare])
    assert isinstance(failure, Failure)
    assert failure.statuses["bare"].reasons == ("node(s) had no NUMA topology",)


def test_stale_agent_node_gets_no_new_placements() -> None:
    nodes = [gpu_node("stale", dgx_h100("stale"), stale=True), plain_node("cpu")]
    result = run(pod("p", gpus=1), nodes)
    assert isinstance(result, Failure)
    assert result.statuses["stale"].reasons == ("node(s) had a stale GPU agent",)


def test_gpus_of_assumed_pods_are_never_reassigned() -> None:
    snapshot = Snapshot([gpu_node("d", dgx1("d")), gpu_node("p", pcie8("p"))])
    sizes = [3, 1, 2, 4, 1, 2, 1, 2]  # 16 GPUs in all: exactly the two nodes
    results = place_all([pod(f"p{i}", gpus=n) for i, n in enumerate(sizes)], snapshot)
    assert all(isinstance(r, Decision) for r in results)
    seen: set[tuple[str, int]] = set()
    for r in results:
        assert isinstance(r, Decision)
        for g in r.placement.gpus:
            assert (r.node, g) not in seen
            seen.add((r.node, g))
    assert len(seen) == 16
    assert isinstance(schedule_one(pod("extra", gpus=1), snapshot, build_framework()), Failure)


def test_forget_returns_the_gpus() -> None:
    snapshot = Snapshot([gpu_node("h", dgx_h100("h"))])
    obj = pod("all", gpus=8)
    (result,) = place_all([obj], snapshot)
    assert isinstance(result, Decision)
    assert isinstance(schedule_one(pod("x", gpus=1), snapshot, build_framework()), Failure)
    assert snapshot.forget(request(obj).key)
    assert isinstance(schedule_one(pod("x", gpus=1), snapshot, build_framework()), Decision)
    assert not snapshot.forget(request(obj).key)


def test_bound_pods_holding_gpus_by_uuid_annotation_are_respected() -> None:
    """After a coordinator restart the inventory rebuilds from topos.io/assigned-gpus."""
    from tests.support.sched_hw import running

    held = pod(
        "old",
        gpus=2,
        annotations={"topos.io/assigned-gpus": "GPU-h-0,GPU-h-5", "topos.io/assigned-numa": "0,1"},
    )
    node = gpu_node("h", dgx_h100("h"), pods=[running(held)])
    got = gpus_of(run(pod("p", gpus=6), [node]))
    assert got == {1, 2, 3, 4, 6, 7}


def test_exhaustive_choice_matches_brute_force_on_dgx1() -> None:
    """The chosen set always has the best achievable worst link for every free set and size."""
    topo = dgx1("d")
    index = topology_index(topo)
    for mask in range(1, 256, 7):
        free = [i for i in range(8) if mask >> i & 1]
        for k in range(1, len(free) + 1):
            choice = index.choose(mask, k, "any")
            assert choice is not None
            best = min(worst_link(topo, c).sort_key()[0] for c in itertools.combinations(free, k))
            assert choice.worst.rank == best
            assert set(choice.gpus) <= set(free)


def test_sixteen_gpu_node_is_pruned_but_still_sound() -> None:
    links = [["X" if i == j else "NV6" for j in range(16)] for i in range(16)]
    topo = topology(
        "dgx2",
        links=links,
        product="V100",
        memory_mib=32768,
        gpu_numa=[i // 8 for i in range(16)],
        numa=dgx1("x").numa_nodes,
        nvswitch=True,
    )
    snapshot = Snapshot([gpu_node("dgx2", topo)])
    results = place_all([pod(f"p{i}", gpus=n) for i, n in enumerate([8, 5, 3])], snapshot)
    chosen = [gpus_of(r) for r in results]
    assert sum(len(c) for c in chosen) == 16
    assert set().union(*chosen) == set(range(16))


def test_single_gpu_pods_fill_a_broken_quad_not_an_intact_one() -> None:
    """Lowest-index-first would break quad A; anti-fragmentation finishes quad B instead."""
    from tests.support.sched_hw import running

    holder = running(pod("holder", gpus=1), gpus=(4,))
    snapshot = Snapshot([gpu_node("d", dgx1("d"), pods=[holder])])
    results = place_all([pod(f"s{i}", gpus=1) for i in range(3)], snapshot)
    assert set().union(*(gpus_of(r) for r in results)) == {5, 6, 7}


def test_single_gpu_pod_takes_the_partner_of_a_busy_pcie_gpu() -> None:
    from tests.support.sched_hw import running

    holder = running(pod("holder", gpus=1), gpus=(2,))
    got = gpus_of(run(pod("s", gpus=1), [gpu_node("p", pcie8("p"), pods=[holder])]))
    assert got == {3}


def test_lookalike_nodes_share_plans_but_report_their_own_uuids() -> None:
    nodes = [gpu_node("twin-a", dgx_h100("twin-a")), gpu_node("twin-b", dgx_h100("twin-b"))]
    first = run(pod("p", gpus=2), nodes)
    second = run(pod("p", gpus=2), nodes, config=None)
    assert isinstance(first, Decision)
    assert isinstance(second, Decision)
    only_b = schedule_one(
        pod("q", gpus=2), Snapshot(nodes), build_framework(), candidate_nodes={"twin-b"}
    )
    assert isinstance(only_b, Decision)
    assert only_b.node == "twin-b"
    assert all(uuid.startswith("GPU-twin-b-") for uuid in only_b.device_ids)
    assert only_b.placement.gpus == first.placement.gpus


@pytest.mark.parametrize("seed", range(6))
def test_random_streams_never_double_book_and_fail_only_when_nothing_fits(seed: int) -> None:
    import random

    from coordinator.core.framework.results import Failure as F
    from coordinator.core.registry import build_framework

    rng = random.Random(seed)
    builders = [dgx1, pcie8, dgx_h100, ws4, a100_mig]
    snapshot = Snapshot([gpu_node(f"n{i}", rng.choice(builders)(f"n{i}")) for i in range(5)])
    fw = build_framework()
    held: dict[tuple[str, object], str] = {}
    for k in range(40):
        gpus = rng.choice([0, 1, 1, 2, 4, 8])
        obj = pod(f"p{k}", cpu=str(rng.choice([1, 2, 8])), memory="4Gi", gpus=gpus)
        if gpus == 0 and rng.random() < 0.5:
            obj["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
        req = request(obj)
        result = schedule_one(obj, snapshot, fw)
        if isinstance(result, F):
            for node in snapshot.nodes:  # really nothing could take it
                fits = (
                    len(node.free_gpus) >= req.gpus
                    and all(node.free(r) >= v for r, v in req.requests.items())
                    and node.free("pods") >= 1
                    and all(len(node.free_mig.get(p, ())) >= n for p, n in req.mig)
                )
                assert not fits, (node.name, result.statuses[node.name])
            continue
        for g in result.placement.gpus:
            assert (result.node, g) not in held
            held[(result.node, g)] = req.key
        for m in result.placement.mig:
            assert (result.node, m) not in held
            held[(result.node, m)] = req.key
        assert len(result.placement.gpus) == req.gpus
        snapshot.assume(req, result.node, result.placement)
