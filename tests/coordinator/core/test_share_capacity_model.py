"""One capacity model for GPU shares (docs/architecture.md#capacity-models): what gang planning
counts of a node's GPUs for shares — its thousandths of a GPU, its places for a share, whether
one GPU has room for a share and which — is preemption's :class:`ShareRoom` with no victims,
and agrees with the per-pod cycle's view of the node (``NodeInfo.share_room``), over random
layouts of whole, shared, claimed, unhealthy and MIG GPUs, known and unknown memory."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from common.model import Gpu, NodeTopology
from coordinator.core.podspec.sharing import WHOLE, GpuShare, HeldShare
from coordinator.core.preemption.shares import room_of
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import PodInfo


@dataclass(frozen=True)
class Layout:
    node: NodeInfo
    ask: GpuShare
    whole_free: int
    fresh: bool


_MEMORY = st.sampled_from([None, 0, 500, 1000, 24 * 1024, 80 * 1024])


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    count = draw(st.integers(1, 4))
    gpus = []
    pods: list[PodInfo] = []
    claimed: set[str] = set()
    for i in range(count):
        memory = draw(_MEMORY)
        uuid = f"GPU-n-{i}"
        gpus.append(
            Gpu(
                index=i,
                uuid=uuid,
                memory_total_mib=memory,
                healthy=draw(st.booleans()) or draw(st.booleans()),
                mig_enabled=draw(st.integers(0, 5)) == 0,
            )
        )
        use = draw(st.sampled_from(["free", "whole", "shared", "shared", "claimed"]))
        if use == "whole":
            pods.append(PodInfo("default", f"w{i}", device_ids=(uuid,)))
        elif use == "claimed":
            claimed.add(uuid)
        if use == "shared" or (use != "free" and draw(st.integers(0, 4)) == 0):
            top = memory or 4096
            for k in range(draw(st.integers(1, 3))):
                milli = draw(st.integers(1, WHOLE))
                # Memory held: none, some, or exactly what is left (a GPU full by memory).
                mib = draw(st.sampled_from([0, top // 4, top // 2, top]))
                share = HeldShare(milli, mib)
                pods.append(PodInfo("default", f"s{i}-{k}", device_ids=(uuid,), share=share))
    links = tuple(tuple("X" if i == j else "SYS" for j in range(count)) for i in range(count))
    topo = NodeTopology(hostname="n", gpus=tuple(gpus), links=links)
    node = NodeInfo.build("n", topology=topo, pods=pods, dra_held=frozenset(claimed))
    ask = draw(
        st.one_of(
            st.builds(GpuShare, milli=st.integers(1, WHOLE)),
            st.builds(GpuShare, memory_mib=st.integers(1, 40 * 1024)),
            st.builds(GpuShare, milli=st.integers(1, WHOLE), memory_mib=st.integers(1, 40 * 1024)),
            st.builds(GpuShare, memory_milli=st.integers(1, WHOLE)),
        )
    )
    return Layout(node, ask, draw(st.integers(0, count)), draw(st.booleans()))


def _now_milli(node: NodeInfo, whole_free: int) -> int:
    """The per-pod cycle's thousandths: the free whole GPUs, and the room of the shared ones."""
    return WHOLE * whole_free + sum(m for i, (m, _) in node.share_room.items() if i in node.shared)


def _now_gpu(node: NodeInfo, ask: GpuShare, *, fresh: bool) -> str | None:
    """The GPU the per-pod cycle gives a share: one of ``share_room`` with room for it, a
    shared one before a free one (a free one only when the node has a whole GPU to give)."""
    assert node.topology is not None
    found = None
    for i, (milli, mib) in node.share_room.items():
        held = ask.on_gpu(node.topology.gpus[i].memory_total_mib)
        if held is None or held.milli > milli or (mib is not None and held.memory_mib > mib):
            continue
        if i in node.shared:
            return node.topology.gpus[i].uuid
        if fresh and found is None:
            found = node.topology.gpus[i].uuid
    return found


def _now_places(node: NodeInfo, ask: GpuShare, whole_free: int) -> int:
    assert node.topology is not None
    shared, fresh = 0, []
    for i, (milli, mib) in node.share_room.items():
        held = ask.on_gpu(node.topology.gpus[i].memory_total_mib)
        if held is None:
            continue
        fit = milli // held.milli
        if mib is not None and held.memory_mib > 0:
            fit = min(fit, mib // held.memory_mib)
        if i in node.shared:
            shared += fit
        else:
            fresh.append(fit)
    return shared + sum(sorted(fresh, reverse=True)[:whole_free])


@settings(max_examples=400, deadline=None)
@given(layouts())
def test_share_room_with_no_victims_is_the_node_as_the_pod_cycle_sees_it(case: Layout) -> None:
    node, ask = case.node, case.ask
    room = room_of(node)
    none: frozenset[str] = frozenset()
    assert room.milli("n", none, case.whole_free) == _now_milli(node, case.whole_free)
    assert room.places("n", ask, none, whole_free=case.whole_free) == _now_places(
        node, ask, case.whole_free
    )
    want = _now_gpu(node, ask, fresh=case.fresh)
    assert room.fits("n", ask, none, fresh=case.fresh) == (want is not None)
    assert room.gpu_for("n", ask, none, fresh=case.fresh) == want
