"""Adding pods to a node without rebuilding it (``NodeInfo.adding``, what an assume and a bind
seen do) gives exactly the node a rebuild from all its pods gives: free GPUs, NUMA capacity,
slots in use, ports, requests — whatever the pods hold."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.core.podspec.sharing import HeldShare
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import NumaUse, Placement, PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod
from tests.support.sched_hw import a100_mig, dgx_h100, gpu_node, plain_node, request, running

PORTS = [{"containerPort": 80, "hostPort": 8080}]


def assumed(name: str, count: int = 0, **placement: object) -> PodInfo:
    return PodInfo.from_request(
        request(pod(name, gpus=count, uid=f"uid-{name}", ports=PORTS)),
        Placement(**placement),  # type: ignore[arg-type]
    )


def seen(name: str, node: NodeInfo, gpus: tuple[int, ...]) -> PodInfo:
    """A pod as the watch shows it once bound: its GPUs by UUID."""
    assert node.topology is not None
    uuids = ",".join(node.topology.gpus[i].uuid for i in gpus)
    obj = pod(name, gpus=len(gpus), uid=f"uid-{name}")
    obj["metadata"]["annotations"] = {"topos.io/assigned-gpus": uuids}
    return running(obj)


def h100(*pods: PodInfo) -> NodeInfo:
    return gpu_node("n", dgx_h100("n"), pods=pods)


CASES = {
    "one GPU assumed": (h100(), lambda n: [assumed("a", 1, gpus=(3,))]),
    "on a busy node": (
        h100(running(pod("old", gpus=2), gpus=(0, 1))),
        lambda n: [assumed("a", 2, gpus=(4, 5))],
    ),
    "the bind seen (GPUs by UUID)": (h100(), lambda n: [seen("b", n, (2, 6))]),
    "CPU only": (h100(), lambda n: [assumed("c")]),
    "a GPU already held (rebuilt)": (
        h100(running(pod("old", gpus=1), gpus=(0,))),
        lambda n: [assumed("a", 1, gpus=(0,))],
    ),
    "a share (rebuilt)": (h100(), lambda n: [assumed("s", 1, gpus=(1,), share=HeldShare(250, 0))]),
    "NUMA-pinned": (
        h100(),
        lambda n: [assumed("p", 1, gpus=(0,), numa=(0,), numa_usage=(NumaUse(0, 1000, 2**30),))],
    ),
    "NUMA ids only (the bind seen)": (h100(), lambda n: [replace(seen("b", n, (4,)), numa=(1,))]),
    "a NUMA node of its own (rebuilt)": (
        h100(),
        lambda n: [assumed("x", 1, gpus=(0,), numa=(0,), exclusive_numa=True)],
    ),
    "a MIG instance (rebuilt)": (
        gpu_node("m", a100_mig("m")),
        lambda n: [assumed("m", 0, mig=((0, 7),))],
    ),
    "whole GPUs beside MIG": (gpu_node("m", a100_mig("m")), lambda n: [assumed("w", 1, gpus=(5,))]),
    "no topology": (plain_node("x", gpus=4), lambda n: [assumed("x", 1)]),
    # A node without a device topology (KWOK, a CPU node) holds counts only: never rebuilt.
    "no topology, on a busy node": (
        plain_node("x", gpus=4, pods=[running(pod("old", gpus=2), gpus=(0, 1))]),
        lambda n: [assumed("a", 1), assumed("b")],
    ),
    "no topology, a share": (
        plain_node("x", gpus=4),
        lambda n: [assumed("s", 1, gpus=(1,), share=HeldShare(250, 0))],
    ),
    "no topology, NUMA-pinned": (
        plain_node("x", gpus=4),
        lambda n: [
            assumed("p", 1, gpus=(0,), numa=(0,), numa_usage=(NumaUse(0, 1000, 2**30),)),
            assumed("x", 1, gpus=(1,), numa=(1,), exclusive_numa=True),
        ],
    ),
    "no topology, GPUs allocated to claims": (
        plain_node("x", gpus=4, dra_held=frozenset({"GPU-0"})),
        lambda n: [assumed("a", 2)],
    ),
    "several at once": (h100(), lambda n: [assumed("a", 1, gpus=(7,)), seen("b", n, (0,))]),
}


@pytest.mark.parametrize("case", CASES)
def test_adding_pods_equals_rebuilding_with_them(case: str) -> None:
    node, make = CASES[case]
    pods = make(node)
    added = node.adding(pods)
    rebuilt = node.rebuild((*node.pods, *pods))
    assert added == rebuilt
    assert added.device_token is rebuilt.device_token  # nodes alike place alike
    assert added.memo == {}
    assert added.memo is not node.memo


def test_adding_a_whole_gpu_pod_takes_its_gpus_and_numa_room() -> None:
    node = h100()
    gpu = 6
    numa = node.topology.gpus[gpu].numa_node if node.topology is not None else None
    after = node.adding([assumed("a", 1, gpus=(gpu,))])
    assert gpu not in after.free_gpus
    assert len(after.free_gpus) == 7
    assert after.gpu_slots_used == 1
    assert after.used_ports == after.pods[0].host_ports
    assert [n.busy for n in after.numa_free if n.numa == numa] == [True]


def test_an_assumed_pod_counts_on_the_snapshot_as_a_rebuilt_node_would() -> None:
    snap = Snapshot([h100()])
    req = request(pod("a", gpus=2, uid="uid-a"))
    snap.assume(req, "n", Placement(gpus=(2, 3)))
    node = snap.get("n")
    assert node is not None
    assert node == replace(node).rebuild(node.pods)
    assert node.free_whole_gpus == 6
    snap.forget("default/a")
    assert snap.get("n") == h100()


def test_the_snapshot_order_keeps_each_version_as_it_was() -> None:
    # A cycle's explanation keeps the node order it saw; an assume afterwards makes a new
    # version (sharing the rest) and leaves the old one as it was.
    names = [f"n{i:03d}" for i in range(150)]
    snap = Snapshot([gpu_node(n, dgx_h100(n)) for n in names])
    before = snap.nodes
    snap.assume(request(pod("a", gpus=1, uid="uid-a")), "n100", Placement(gpus=(0,)))
    after = snap.nodes
    assert [n.name for n in after] == names
    assert before[100].free_whole_gpus == 8
    assert after[100].free_whole_gpus == 7
    assert after[100] is snap.get("n100")
    assert [n.name for n in after[60:130]] == names[60:130]
    assert after[-1].name == "n149"
    assert list(after[5:2]) == []


def _busy(*extra: PodInfo, topology: bool = False, **kw: object) -> NodeInfo:
    pods = [
        running(pod("a", gpus=1, uid="uid-a")),
        running(pod("b", uid="uid-b", ports=PORTS)),
        running(pod("c", gpus=2, uid="uid-c")),
        *extra,
    ]
    if topology:
        return h100(*pods)
    return plain_node("x", gpus=8, pods=pods, **kw)  # type: ignore[arg-type]


ASKS_PODS = replace(running(pod("p", uid="uid-p")), requests={"cpu": 100, "pods": 6})

# (node, the pods it holds afterwards, in their order, given the node's own) with what left
# and came: a pod deleted, one changed where it is (new requests), one moved to the end.
CHANGES = {
    "one left": (_busy(), lambda ps: [ps[0], ps[2]], [1], []),
    "a GPU pod left": (_busy(), lambda ps: [ps[1], ps[2]], [0], []),
    "one changed in place": (
        _busy(),
        lambda ps: [ps[0], replace(ps[1], requests={"cpu": 5000}), ps[2]],
        [1],
        [1],
    ),
    "one left and one came": (
        _busy(),
        lambda ps: [ps[1], ps[2], running(pod("d", gpus=3, uid="uid-d", ports=PORTS))],
        [0],
        [2],
    ),
    "every pod left": (_busy(), lambda ps: [], [0, 1, 2], []),
    "a pod that asks for pods left": (_busy(ASKS_PODS), lambda ps: [ps[0], ps[1], ps[2]], [3], []),
    "the others left a pod that asks for pods": (
        _busy(ASKS_PODS),
        lambda ps: [ps[3]],
        [0, 1, 2],
        [],
    ),
    "GPUs allocated to claims (rebuilt)": (
        _busy(dra_held=frozenset({"GPU-0"})),
        lambda ps: [ps[0]],
        [1, 2],
        [],
    ),
    "a device topology (rebuilt)": (_busy(topology=True), lambda ps: [ps[1]], [0, 2], []),
}


@pytest.mark.parametrize("case", CHANGES)
def test_pods_taken_out_and_changed_give_the_node_a_rebuild_gives(case: str) -> None:
    # What the view does when the watch says pods were deleted or changed on a node: no walk
    # over the pods that stayed (a DaemonSet's node holds thousands), the same node.
    node, after, left_at, came_at = CHANGES[case]
    pods = tuple(after(node.pods))
    left = [node.pods[i] for i in left_at]
    came = [pods[i] for i in came_at]
    changed = node.with_pods(pods, left=left, came=came)
    rebuilt = node.rebuild(pods)
    assert changed == rebuilt
    assert changed.device_token is rebuilt.device_token
    assert changed.state_key is rebuilt.state_key
    assert changed.memo == {}


def test_a_node_without_the_pods_that_left_has_their_room_and_ports_again() -> None:
    node = _busy(ASKS_PODS)
    assert node.requested["pods"] == 6
    assert node.used_ports
    after = node.with_pods((node.pods[0],), left=node.pods[1:], came=())
    assert after.requested == {**node.pods[0].requests, "pods": 1}
    assert after.unattributed_gpus == 1
    assert after.used_ports == ()
