"""GPU sharing (docs/sharing.md): asking for part of a GPU, the bookkeeping of shared GPUs, and
where fractional pods go."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec import structs

from coordinator.app.config.scheduling import load_config
from coordinator.core.framework.config import ConfigError
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.plugins.fragscore import GpuFragmentationArgs
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from coordinator.core.podspec.sharing import HeldShare
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod
from tests.support.sched_hw import (
    a100_mig,
    dgx_h100,
    gpu_node,
    pcie8,
    place_all,
    request,
    running,
)


def frac(name: str, fraction: str | None = None, *, memory: str | None = None, **kw: Any) -> Any:
    ann = dict(kw.pop("annotations", {}))
    if fraction is not None:
        ann["topos.io/gpu-fraction"] = fraction
    if memory is not None:
        ann["topos.io/gpu-memory"] = memory
    return pod(name, annotations=ann, **kw)


def with_limits(obj: Any, limits: dict[str, str]) -> Any:
    obj["spec"]["containers"][0]["resources"]["limits"] = limits
    return obj


def error(obj: Any) -> PodSpecError:
    parsed = parse_pod(obj)
    assert isinstance(parsed, PodSpecError), parsed
    return parsed


# --- asking -------------------------------------------------------------------------------------


def test_topos_keys_and_kai_aliases_read_the_same_share() -> None:
    ours = request(frac("a", "0.25", memory="10Gi")).share
    kai = request(pod("b", annotations={"gpu-fraction": "0.25", "gpu-memory": "10240"})).share
    assert ours is not None
    assert kai is not None
    assert (ours.milli, ours.memory_mib) == (kai.milli, kai.memory_mib) == (250, 10240)


def test_hami_volcano_and_aliyun_resources_are_read_in_their_units() -> None:
    hami = request(with_limits(pod("h"), {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}))
    assert hami.share is not None
    assert hami.share.memory_mib == 4000
    assert hami.share.replica
    assert hami.gpus == 0  # its nvidia.com/gpu is a replica of the shared GPU
    cores = request(with_limits(pod("c"), {"nvidia.com/gpucores": "30"})).share
    assert cores is not None
    assert cores.milli == 300
    volcano = request(with_limits(pod("v"), {"volcano.sh/vgpu-memory": "3000"})).share
    assert volcano is not None
    assert volcano.memory_mib == 3000
    aliyun = request(with_limits(pod("a"), {"aliyun.com/gpu-mem": "8"})).share
    assert aliyun is not None
    assert aliyun.memory_mib == 8 * 1024


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("0", "'0' is not in (0, 1]"),
        ("-0.5", "'-0.5' is not in (0, 1]"),
        ("1.5", "'1.5' is not in (0, 1]: a fraction is part of one GPU"),
        ("half", "'half' is not a number"),
    ],
)
def test_bad_fractions_name_the_key(value: str, says: str) -> None:
    bad = error(frac("p", value))
    assert bad.field == "metadata.annotations[topos.io/gpu-fraction]"
    assert says in bad.message


@pytest.mark.parametrize(
    ("resource", "says"),
    [
        ("nvidia.com/gpumem-percentage", "0 is not a percentage from 1 to 100"),
        ("nvidia.com/gpucores", "0 is not a percentage from 1 to 100"),
        ("nvidia.com/gpumem", "0 is no amount of GPU memory"),
    ],
)
def test_a_share_of_nothing_is_invalid_not_a_gpu_less_pod(resource: str, says: str) -> None:
    # 0 % of a GPU's memory is no share: refused, naming the field and the value, not read as
    # if the resource were absent (a whole GPU here; a GPU-less pod without nvidia.com/gpu).
    bad = error(with_limits(pod("h"), {"nvidia.com/gpu": "1", resource: "0"}))
    assert bad.field == f"spec.containers[0].resources.limits[{resource}]"
    assert says in bad.message
    # The same pod asking 50 % is a share; a pod writing nvidia.com/gpu: 0 is simply GPU-less.
    half = request(with_limits(pod("h"), {"nvidia.com/gpu": "1", resource: "50"})).share
    assert half is not None
    assert request(with_limits(pod("c"), {"nvidia.com/gpu": "0"})).gpus == 0


def test_a_share_of_more_than_one_gpu_is_invalid() -> None:
    bad = error(frac("p", "0.5", gpus=2))
    assert "part of ONE GPU" in bad.message
    assert "2 nvidia.com/gpu" in bad.message
    bad = error(with_limits(pod("h"), {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4000"}))
    assert bad.field == "spec.containers[*].resources.limits[nvidia.com/gpumem]"


def test_a_share_and_a_mig_profile_together_are_invalid() -> None:
    bad = error(frac("p", "0.5", annotations={"topos.io/mig-profile": "1g.10gb"}))
    assert "MIG instances are never shared by fraction" in bad.message


def test_contradicting_spellings_are_named() -> None:
    bad = error(with_limits(frac("p", "0.5"), {"nvidia.com/gpucores": "40"}))
    assert "contradicts spec.containers[*].resources.limits[nvidia.com/gpucores]" in bad.message


def test_more_memory_than_any_gpu_has_says_the_largest() -> None:
    nodes = [gpu_node("h", dgx_h100("h")), gpu_node("p", pcie8("p"))]
    result = schedule_one(frac("big", memory="90Gi"), Snapshot(nodes), build_framework())
    assert isinstance(result, Failure)
    assert result.unresolvable
    assert "topos.io/gpu-memory]: no GPU has 90Gi; largest is 79.6Gi" in result.message


# --- placement ------------------------------------------------------------------------------------


def test_two_halves_share_one_gpu_and_say_so() -> None:
    snapshot = Snapshot([gpu_node("h", dgx_h100("h"))])
    first, second = place_all([frac("a", "0.5"), frac("b", "0.5")], snapshot)
    assert isinstance(first, Decision)
    assert isinstance(second, Decision)
    assert first.placement.gpus == second.placement.gpus
    assert first.annotations()["topos.io/gpu-share"] == "fraction=0.5,memory=40779Mi"
    assert first.annotations()["topos.io/assigned-gpus"] == second.device_ids[0]
    node = snapshot.get("h")
    assert node is not None
    assert len(node.free_gpus) == 7


def test_the_next_half_joins_the_half_used_gpu_not_a_fresh_one() -> None:
    (gpu,) = dgx_h100("h").gpus[3:4]
    placed = {"topos.io/assigned-gpus": gpu.uuid, "topos.io/gpu-share": "fraction=0.5"}
    half = running(frac("old", "0.5", annotations=placed))
    node = gpu_node("h", dgx_h100("h"), pods=[half])
    result = schedule_one(frac("new", "0.5"), Snapshot([node]), build_framework())
    assert isinstance(result, Decision)
    assert result.placement.gpus == (3,)


def test_a_whole_gpu_pod_never_lands_on_a_shared_gpu() -> None:
    snapshot = Snapshot([gpu_node("h", dgx_h100("h"))])
    place_all([frac("s", "0.25")], snapshot)
    results = place_all([pod(f"w{i}", gpus=1) for i in range(8)], snapshot)
    placed = [r for r in results if isinstance(r, Decision)]
    assert len(placed) == 7  # the shared GPU is not free for a whole-GPU pod
    shared = snapshot.get("h")
    assert shared is not None
    assert not set(shared.shared) & {g for r in placed for g in r.placement.gpus}
    assert isinstance(results[-1], Failure)


def test_shares_fill_a_gpu_to_its_capacity_and_no_further() -> None:
    snapshot = Snapshot([gpu_node("h", pcie8("h"))])
    results = place_all([frac(f"q{i}", "0.3") for i in range(4)], snapshot)
    gpus = [r.placement.gpus for r in results if isinstance(r, Decision)]
    assert gpus[0] == gpus[1] == gpus[2] != gpus[3]  # 0.9 on one GPU; the fourth opens another


def test_memory_asks_count_against_the_gpus_memory() -> None:
    snapshot = Snapshot([gpu_node("p", pcie8("p", memory_mib=46068))])  # 45Gi L40S
    a, b = place_all([frac("a", memory="30Gi"), frac("b", memory="20Gi")], snapshot)
    assert isinstance(a, Decision)
    assert isinstance(b, Decision)
    assert a.placement.gpus != b.placement.gpus  # 50Gi does not fit one 45Gi GPU
    assert a.placement.share is not None
    assert a.placement.share.memory_mib == 30 * 1024


def test_a_fractional_pod_keeps_an_intact_nvlink_group_when_pcie_gpus_exist() -> None:
    busy = [
        running(pod(f"w{i}", gpus=1, annotations={"topos.io/assigned-gpus": f"GPU-p-{i}"}))
        for i in range(7)
    ]
    nodes = [gpu_node("dgx", dgx_h100("dgx")), gpu_node("p", pcie8("p"), pods=busy)]
    snapshot = Snapshot(nodes)
    results = place_all([frac(f"s{i}", "0.5") for i in range(2)], snapshot)
    assert all(isinstance(r, Decision) and r.node == "p" for r in results)


def test_mig_enabled_gpus_are_never_shared() -> None:
    topo = a100_mig("m")  # GPUs 0 and 1 MIG-enabled, 2-7 whole
    mig_only = structs.replace(
        topo, gpus=tuple(structs.replace(g, mig_enabled=True) for g in topo.gpus)
    )
    mig_node = gpu_node("m", mig_only)
    result = schedule_one(frac("s", "0.5"), Snapshot([mig_node]), build_framework())
    assert isinstance(result, Failure)
    assert "only MIG-enabled GPUs, which are never shared by fraction" in result.message
    mixed = schedule_one(frac("s", "0.5"), Snapshot([gpu_node("m", topo)]), build_framework())
    assert isinstance(mixed, Decision)
    assert mixed.placement.gpus[0] >= 2


def test_asking_one_nvidia_gpu_with_a_share_needs_a_node_with_replicas() -> None:
    plain = gpu_node("plain", pcie8("plain"))
    sliced = gpu_node(
        "sliced", pcie8("sliced"), labels={"nvidia.com/gpu.sharing-strategy": "time-slicing"}
    )
    obj = frac("s", "0.5", gpus=1)
    refused = schedule_one(obj, Snapshot([plain]), build_framework())
    assert isinstance(refused, Failure)
    assert "no time-slicing or MPS replicas" in refused.message
    assert isinstance(schedule_one(obj, Snapshot([plain, sliced]), build_framework()), Decision)


# --- bookkeeping ------------------------------------------------------------------------------


def test_restart_rebuilds_shares_from_annotations() -> None:
    """A coordinator restarted reads topos.io/gpu-share back: the GPU is still shared, with the
    room the pods left."""
    snapshot = Snapshot([gpu_node("h", dgx_h100("h"))])
    (decision,) = place_all([frac("a", "0.75")], snapshot)
    assert isinstance(decision, Decision)
    bound = frac("a", "0.75", annotations=decision.annotations())
    node = gpu_node("h", dgx_h100("h"), pods=[running(bound)])
    (gpu,) = decision.placement.gpus
    assert node.shared[gpu].milli == 750
    assert node.share_room[gpu] == (250, 81559 - 61169)
    assert gpu not in node.free_gpus
    again = schedule_one(frac("b", "0.5"), Snapshot([node]), build_framework())
    assert isinstance(again, Decision)
    assert again.placement.gpus != (gpu,)
    fits = schedule_one(frac("c", "0.25"), Snapshot([node]), build_framework())
    assert isinstance(fits, Decision)
    assert fits.placement.gpus == (gpu,)


def test_device_state_tells_shares_apart() -> None:
    base = dgx_h100("h")
    on0 = {"topos.io/assigned-gpus": base.gpus[0].uuid}
    quarter = {**on0, "topos.io/gpu-share": "fraction=0.25,memory=20Gi"}
    half = {**on0, "topos.io/gpu-share": "fraction=0.5,memory=40Gi"}
    one = gpu_node("h", base, pods=[running(pod("a", annotations=quarter))])
    two = gpu_node("h", base, pods=[running(pod("a", annotations=half))])
    assert one.shared[0].milli == 250
    assert two.shared[0].milli == 500
    assert one.device_token is not two.device_token


def test_request_round_trip() -> None:
    parsed = parse_pod(frac("p", "0.125"))
    assert isinstance(parsed, PodRequest)
    assert parsed.share is not None
    assert parsed.share.on_gpu(81920) == HeldShare(125, 10240)


def test_fragmentation_config_is_checked() -> None:
    given = load_config({"fragmentation": {"allPods": True}}).args["GpuFragmentation"]
    assert given == GpuFragmentationArgs(all_pods=True)
    auto = load_config({"fragmentation": {"allPods": "auto"}}).args["GpuFragmentation"]
    assert auto == GpuFragmentationArgs(all_pods=None)
    with pytest.raises(ConfigError, match=r"fragmentation\.allPods: must be true, false or auto"):
        load_config({"fragmentation": {"allPods": "yes"}})
    with pytest.raises(ConfigError, match=r"fragmentation\.allpods: unknown key"):
        load_config({"fragmentation": {"allpods": True}})


# --- fragmentation ------------------------------------------------------------------------------


def test_fragmentation_counts_what_each_shape_could_not_use() -> None:
    from coordinator.core.plugins.fragmentation import Mix, NodeRoom, fragmentation

    room = NodeRoom(cpu=64, free=(300, 600, 1000, 1000), whole=2)  # 2.9 GPUs free
    halves = Mix(-101, (((4, 0, 500, 8), 1.0),))
    assert fragmentation(room, halves) == 300  # only the 0.3 GPU is too small for a half
    pairs = Mix(-102, (((4, 2, 0, 8), 1.0),))
    assert fragmentation(room, pairs) == 900  # the partly used GPUs
    fours = Mix(-103, (((4, 4, 0, 8), 1.0),))
    assert fragmentation(room, fours) == 2900  # two whole GPUs free: a 4-GPU pod fits nowhere
    memory_bound = Mix(-104, (((4, 0, 250, 100), 1.0),))
    # 50 GiB free: too little memory for the shape (all 2.9 GPUs), and it feeds only 0.125 GPU at
    # the mix's 400 GiB per GPU (2.775 GPUs stranded)
    assert fragmentation(NodeRoom(64, room.free, 2, memory=50), memory_bound) == 2900 + 2775
    mixed = Mix(-105, (((4, 0, 500, 8), 0.5), ((4, 2, 0, 8), 0.5)))
    assert fragmentation(room, mixed) == 600


def test_fragmentation_counts_the_gpus_the_free_cpu_cannot_feed() -> None:
    from coordinator.core.plugins.fragmentation import Mix, NodeRoom, fragmentation

    eights = Mix(-106, (((8, 1, 0, 8), 1.0),))  # 8 cores per GPU
    free = (1000, 1000, 1000, 1000)
    assert fragmentation(NodeRoom(cpu=32, free=free, whole=4), eights) == 0
    # 20 cores feed 2.5 GPUs at the mix's 8 per GPU: 1.5 GPUs are stranded, though every shape
    # still fits today
    assert fragmentation(NodeRoom(cpu=20, free=free, whole=4), eights) == 1500
    # no CPU for any: all 4 GPUs (for the shape) and all 4 (stranded) count
    assert fragmentation(NodeRoom(cpu=4, free=free, whole=4), eights) == 4000 + 3500


def test_nodes_keyed_alike_by_their_felt_cpu_and_memory_grow_alike() -> None:
    """Fragmentation scores and share plans are remembered per the node's free CPU and memory
    as :func:`felt` keys them: any two rooms it keys alike grow alike under any pod; and it
    does tell apart rooms that grow differently (no key by the GPUs alone)."""
    import random

    from coordinator.core.plugins.fragmentation import Mix, NodeRoom, felt, fragmentation

    rng = random.Random(3)
    told_apart = 0
    for i in range(400):
        shapes = tuple(
            ((rng.choice((1, 4, 8, 16)), 0, rng.choice((250, 500)), rng.choice((2, 16, 64))), 0.5)
            for _ in range(2)
        )
        mix = Mix(-200 - i, shapes)
        free = tuple(sorted(rng.choice((0, 300, 500, 1000)) for _ in range(rng.randint(1, 8))))
        whole = free.count(1000)
        cores, gib = rng.choice((0, 1, 6)), rng.choice((0, 4, 30))
        take = rng.choice((0, min(whole, 1)))

        def grown(
            cpu: int, memory: int, ask: tuple[Any, ...] = (mix, free, take, cores, gib)
        ) -> int:
            mix_, free_, take_, cores_, gib_ = ask
            room = NodeRoom(cpu, free_, free_.count(1000), memory)
            after = room.without_whole(take_, cores_, gib_)
            return fragmentation(after, mix_) - fragmentation(room, mix_)

        a = (rng.randint(cores, 200), rng.randint(gib, 600))
        b = (rng.randint(cores, 200), rng.randint(gib, 600))
        key_a = felt(NodeRoom(a[0], free, whole, a[1]), mix, cores, gib)
        key_b = felt(NodeRoom(b[0], free, whole, b[1]), mix, cores, gib)
        if key_a == key_b:
            assert grown(*a) == grown(*b), (mix, free, a, b)
        elif grown(*a) != grown(*b):
            told_apart += 1
    assert told_apart > 0


def test_the_shape_mix_counts_each_pod_once_and_forgets_slowly() -> None:
    from coordinator.core.plugins.fragmentation import ShapeMix

    mix = ShapeMix(half_life=10, default={(8, 1, 0, 32): 1.0})
    half = request(frac("h", "0.5", uid="u1"))
    first = mix.current().version
    for _ in range(40):
        mix.record(half)  # the same pod, retried: once
    assert mix.current().version == first  # refreshed every 32 pods
    for i in range(64):
        mix.record(request(frac(f"h{i}", "0.5", uid=f"u-{i}")))
    shapes = dict(mix.current().shapes)
    assert mix.current().version > first
    assert shapes[(1, 0, 500, 1)] > 0.99  # the default's whole GPUs have faded
    settled = mix.current().version
    for i in range(32):
        mix.record(request(frac(f"s{i}", "0.5", uid=f"s-{i}")))
    assert mix.current().version == settled  # the same shapes again: no new mix to score by
    for i in range(32):
        mix.record(request(frac(f"q{i}", "0.25", uid=f"q-{i}")))
    assert mix.current().version != settled  # the shapes drifted: a new mix
    assert dict(mix.current().shapes)[(1, 0, 250, 1)] > 0.5


def test_a_fresh_half_joins_another_nodes_half_used_gpu_before_opening_one() -> None:
    (gpu,) = pcie8("a").gpus[3:4]
    placed = {"topos.io/assigned-gpus": gpu.uuid, "topos.io/gpu-share": "fraction=0.5"}
    half = running(frac("old", "0.5", annotations=placed))
    nodes = [gpu_node("b", pcie8("b")), gpu_node("a", pcie8("a"), pods=[half])]
    result = schedule_one(frac("new", "0.5"), Snapshot(nodes), build_framework())
    assert isinstance(result, Decision)
    assert (result.node, result.placement.gpus) == ("a", (3,))


def test_once_shares_are_seen_a_cpu_only_pod_leaves_the_cpu_free_gpus_need() -> None:
    fw = build_framework()
    # The cluster's GPU pods ask 8 cores per half GPU: 16 cores per GPU.
    warm = Snapshot([gpu_node(f"w{i}", pcie8(f"w{i}"), cpu=256) for i in range(3)])
    place_all([frac(f"h{i}", "0.5", cpu="8") for i in range(33)], warm, fw)
    # "tight" has just the 128 cores its 8 free GPUs need; "roomy" has 156 of 256 free.
    busy = running(pod("busy", cpu="100"))
    nodes = [
        gpu_node("tight", pcie8("tight"), cpu=128),
        gpu_node("roomy", pcie8("roomy"), cpu=256, pods=[busy]),
    ]
    result = schedule_one(pod("batch", cpu="32"), Snapshot(nodes), fw)
    assert isinstance(result, Decision)
    assert result.node == "roomy"  # LeastAllocated alone would pick "tight" (75 % CPU left)
    # Without shares seen (a whole-GPU cluster) the pod is placed as before.
    plain = schedule_one(pod("batch", cpu="32"), Snapshot(nodes), build_framework())
    assert isinstance(plain, Decision)
    assert plain.node == "tight"


def test_alike_nodes_share_a_whole_gpu_pods_fragmentation_score_and_free_cpu_tells_them_apart() -> (
    None
):
    fw = build_framework()
    warm = Snapshot([gpu_node(f"w{i}", pcie8(f"w{i}"), cpu=256) for i in range(3)])
    place_all([frac(f"h{i}", "0.5", cpu="8") for i in range(33)], warm, fw)  # shares are seen
    busy = running(pod("busy", cpu="160", memory=None))
    nodes = [
        gpu_node("a", pcie8("a"), cpu=256),
        gpu_node("b", pcie8("b"), cpu=256),  # a's twin: the score remembered for a is b's
        gpu_node("c", pcie8("c"), cpu=256, pods=[busy]),  # same GPUs, 96 cores free
    ]
    result = schedule_one(pod("one", gpus=1, cpu="8"), Snapshot(nodes), fw)
    assert isinstance(result, Decision)
    score = {n: result.verdicts[n].scores["GpuFragmentation"] for n in ("a", "b", "c")}
    assert score["a"] == score["b"]
    # c's 96 free cores feed 6 of its 8 GPUs at the mix's 16 cores per GPU (a's feed all): the
    # same pod changes its fragmentation by another amount
    assert score["c"] != score["a"]


@pytest.mark.parametrize("fraction", ["0.25", None])  # a share; one whole GPU
def test_a_remembered_decision_is_the_one_made_under_the_current_shape_mix(
    fraction: str | None,
) -> None:
    fw = build_framework()

    def cluster() -> Snapshot:  # two nodes alike (a single feasible node is not scored)
        nodes = []
        for name in ("a", "b"):
            (gpu,) = pcie8(name).gpus[3:4]
            placed = {"topos.io/assigned-gpus": gpu.uuid, "topos.io/gpu-share": "fraction=0.5"}
            half = running(frac(f"old-{name}", "0.5", annotations=placed))
            nodes.append(gpu_node(name, pcie8(name), pods=[half]))
        return Snapshot(nodes)

    def ask_pod(name: str) -> Any:
        return frac(name, fraction, gpus=0 if fraction else 1)

    place_all([frac(f"h{i}", "0.5") for i in range(8)], cluster(), fw)  # shares are seen
    warm = cluster()
    before = schedule_one(ask_pod("p"), warm, fw)  # remembered on warm's node
    # The cluster then sees mostly pods asking for three quarters of a GPU and 8 cores.
    place_all([frac(f"q{i}", "0.75", cpu="8") for i in range(300)], cluster(), fw)
    again = schedule_one(ask_pod("p2"), warm, fw)
    cold = schedule_one(ask_pod("p3"), cluster(), fw)
    assert isinstance(before, Decision)
    assert isinstance(again, Decision)
    assert isinstance(cold, Decision)
    assert cold.breakdown["GpuFragmentation"] != before.breakdown["GpuFragmentation"]
    assert (again.placement, again.breakdown) == (cold.placement, cold.breakdown)


def test_on_a_busy_cluster_a_share_finds_the_one_gpu_with_room_and_a_refusal_names_every_node() -> (
    None
):
    full = [
        gpu_node(
            f"n{i:02d}",
            pcie8(f"n{i:02d}"),
            pods=[running(pod(f"w{i}", gpus=8), gpus=tuple(range(8)))],
        )
        for i in range(15)
    ]
    (gpu,) = pcie8("room").gpus[:1]
    placed = {"topos.io/assigned-gpus": gpu.uuid, "topos.io/gpu-share": "fraction=0.5"}
    half = running(frac("old", "0.5", annotations=placed))
    others = [running(pod(f"x{i}", gpus=1, cpu="8"), gpus=(i,)) for i in range(1, 8)]
    room = gpu_node("room", pcie8("room"), pods=[half, *others])
    snapshot = Snapshot([*full, room])
    fw = build_framework()
    found = schedule_one(frac("p", "0.5"), snapshot, fw)
    assert isinstance(found, Decision)
    assert (found.node, found.placement.gpus) == ("room", (0,))
    refused = schedule_one(frac("big", "0.5", cpu="10"), snapshot, fw)
    assert isinstance(refused, Failure)
    assert refused.message.startswith("0/16 nodes are available")
    assert "15 node(s) had no GPU with room for the share" in refused.message
    assert "1 Insufficient cpu" in refused.message


def test_a_restarted_scheduler_reads_the_shape_mix_from_the_pods_running() -> None:
    # Halves asking 8 cores each run on three nodes, placed by an earlier coordinator.
    held = {"topos.io/gpu-share": "fraction=0.5"}
    halves = [
        running(frac(f"h{i}", "0.5", cpu="8", uid=f"u-{i}", annotations=held)) for i in range(12)
    ]
    busy = running(pod("busy", cpu="100"))
    nodes = [
        gpu_node("tight", pcie8("tight"), cpu=128),
        gpu_node("roomy", pcie8("roomy"), cpu=256, pods=[busy]),
    ]
    fresh = build_framework()
    fresh.observe_running(halves)
    result = schedule_one(pod("batch", cpu="32"), Snapshot(nodes), fresh)
    assert isinstance(result, Decision)
    assert result.node == "roomy"  # the CPU 8 free GPUs need is left on "tight", as before
    fresh.observe_running(halves)  # seen again (a reload): counted once
    again = schedule_one(pod("batch", cpu="32"), Snapshot(nodes), fresh)
    assert isinstance(again, Decision)
    assert again.node == "roomy"
    # Only whole-GPU pods running: no shares seen, the pod goes where it always went.
    wholes = [running(pod(f"w{i}", gpus=1, cpu="8", uid=f"w-{i}")) for i in range(12)]
    plain = build_framework()
    plain.observe_running(wholes)
    other = schedule_one(pod("batch", cpu="32"), Snapshot(nodes), plain)
    assert isinstance(other, Decision)
    assert other.node == "tight"
