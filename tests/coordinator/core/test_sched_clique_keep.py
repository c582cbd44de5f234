"""CliqueKeep: lone GPU and CPU pods take nodes outside the NVL72 racks while those have room,
and a rack tray when nothing else does; gang members and clusters without cliques are not
steered."""

from __future__ import annotations

from coordinator.core.framework.results import Decision
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node, place_all, request, running

UUID = "3c5b0f2e-8a4d-4e6b-9f1a-2d7c6e5b4a39"
CLIQUE = {"nvidia.com/gpu.clique": f"{UUID}.1"}


def cluster(*, cliques: bool = True) -> Snapshot:
    trays = [
        gpu_node(f"a-tray-{i}", dgx_h100(f"a-tray-{i}"), labels=CLIQUE if cliques else {}, gpus=4)
        for i in range(2)
    ]
    hgx = gpu_node("z-hgx", dgx_h100("z-hgx"), gpus=8)
    return Snapshot([*trays, hgx])


def nodes_of(results: list[object]) -> list[str]:
    out = []
    for r in results:
        assert isinstance(r, Decision), r
        out.append(r.node)
    return out


def test_small_gpu_and_cpu_pods_stay_off_the_rack_while_other_nodes_have_room() -> None:
    snap = cluster()
    placed = nodes_of(place_all([pod("small", gpus=1), pod("cpu-only", gpus=0)], snap))
    assert placed == ["z-hgx", "z-hgx"]


def test_without_cliques_the_same_pod_goes_where_the_other_scorers_say() -> None:
    # the trays are tighter (4 GPUs): best fit would take one of them
    assert nodes_of(place_all([pod("small", gpus=1)], cluster(cliques=False))) != ["z-hgx"]


def test_a_rack_tray_is_used_once_nothing_else_has_room() -> None:
    snap = cluster()
    placed = nodes_of(place_all([pod(f"p{k}", gpus=4) for k in range(3)], snap))
    assert placed[:2] == ["z-hgx", "z-hgx"]
    assert placed[2].startswith("a-tray-")


def tray(name: str, rack: int, *, used: int = 0) -> NodeInfo:
    """A 4-GPU tray of NVL72 rack ``rack``, ``used`` of its GPUs taken by a running pod."""
    gpus = tuple(range(used))
    pods = [running(pod(f"on-{name}", gpus=used, node=name), gpus=gpus)] if used else []
    labels = {"nvidia.com/gpu.clique": f"{UUID}.{rack}"}
    return gpu_node(name, dgx_h100(name), labels=labels, gpus=4, pods=pods)


def test_a_sampled_cycle_still_scores_the_nodes_outside_the_racks() -> None:
    # 150 trays listed first, then 20 HGX nodes: kube-scheduler's adaptive sample (100 feasible
    # nodes of 170, from the first) would hold only trays; a lone GPU pod must still see the HGX
    trays = [tray(f"a-tray-{i:03d}", 1 + i // 18) for i in range(150)]
    hgx = [gpu_node(f"z-hgx-{i:02d}", dgx_h100(f"z-hgx-{i:02d}"), gpus=8) for i in range(20)]
    snap = Snapshot([*trays, *hgx])
    placed = nodes_of(place_all([pod("small", gpus=1), pod("four", gpus=4)], snap))
    assert all(n.startswith("z-hgx-") for n in placed), placed


def test_a_small_pod_breaks_into_a_rack_already_in_use_before_an_idle_one() -> None:
    # rack 2 is idle; rack 1 has one tray full and one whole tray left (names would pick rack 2)
    racks = [tray("b-tray-1", 2), tray("b-tray-2", 2), tray("z-tray-1", 1, used=4)]
    snap = Snapshot([*racks, tray("z-tray-2", 1)])
    assert nodes_of(place_all([pod("small", gpus=2)], snap)) == ["z-tray-2"]


def test_a_small_pod_fills_a_partly_used_tray_before_a_whole_one() -> None:
    snap = Snapshot([tray("a-tray-1", 1), tray("z-tray-1", 1, used=2), tray("z-tray-2", 2)])
    assert nodes_of(place_all([pod("small", gpus=2)], snap)) == ["z-tray-1"]


def test_the_nodes_visited_first_follow_assume_forget_and_copies() -> None:
    # kept in the snapshot (not rebuilt per pod): an idle tray becomes open when a pod takes
    # part of it, closed again when the pod is forgotten; a copy's changes stay its own
    snap = Snapshot([tray("a-tray-1", 1), tray("a-tray-2", 1), tray("b-tray-1", 2)])
    hgx = gpu_node("z-hgx", dgx_h100("z-hgx"), gpus=8)
    snap.replace(hgx)
    slots = snap.domain_slots("nvidia.com/gpu.clique")
    assert set(slots.open) == {"z-hgx"}
    small = request(pod("small", gpus=1))
    snap.assume(small, "a-tray-1", Placement(gpus=(0,)))
    assert set(slots.open) == {"z-hgx", "a-tray-1"}
    trial = snap.copy()
    trial.assume(request(pod("two", gpus=2)), "a-tray-2", Placement(gpus=(0, 1)))
    trial.remove("z-hgx")
    assert set(trial.domain_slots("nvidia.com/gpu.clique").open) == {"a-tray-1", "a-tray-2"}
    assert set(snap.domain_slots("nvidia.com/gpu.clique").open) == {"z-hgx", "a-tray-1"}
    snap.forget(small.key)
    assert set(snap.domain_slots("nvidia.com/gpu.clique").open) == {"z-hgx"}
