"""CliqueKeep: lone GPU and CPU pods take nodes outside the NVL72 racks while those have room,
and a rack tray when nothing else does; gang members and clusters without cliques are not
steered."""

from __future__ import annotations

from coordinator.core.framework.results import Decision
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node, place_all

CLIQUE = {"nvidia.com/gpu.clique": "3c5b0f2e-8a4d-4e6b-9f1a-2d7c6e5b4a39.1"}


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
