"""Placement reads the agent's health verdicts (docs/health.md, "Placement"): a degraded NVLink
pair counts as its fallback link class, a downtrained PCIe link lowers a node for multi-GPU
pods, a degraded fabric lowers a node for gang members, an unhealthy GPU is never offered — and
each is said in words."""

from __future__ import annotations

import msgspec

from common.linkhealth import degraded_pairs, effective_link, health_notes
from common.model import GpuFabric, GpuHealth, NodeTopology, NvLinkHealth
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.engine.ports import PodRef, scheduled_message
from coordinator.engine.whatif.placing import placement_of
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node, run, ws4

CRC = "NVLink 0 (to 00000000:02:00.0) degraded: 2,341 CRC errors in 10 min"


def _with(topo: NodeTopology, **per_gpu: dict[str, object]) -> NodeTopology:
    """``topo`` with fields replaced on the GPUs named ``g<index>``."""
    gpus = tuple(msgspec.structs.replace(g, **per_gpu.get(f"g{g.index}", {})) for g in topo.gpus)
    return msgspec.structs.replace(topo, gpus=gpus)


def _bus(topo: NodeTopology) -> NodeTopology:
    return _with(
        topo, **{f"g{g.index}": {"pci_bus_id": f"00000000:0{g.index + 1}:00.0"} for g in topo.gpus}
    )


def _degrade(topo: NodeTopology, gpu: int, peer: int | None, reason: str = CRC) -> NodeTopology:
    peer_bus = None if peer is None else topo.gpus[peer].pci_bus_id
    port = NvLinkHealth(
        link=0, peer_bus_id=peer_bus, status="degraded", reason=reason, crc_in_window=2341
    )
    return _with(
        topo,
        **{f"g{gpu}": {"health": GpuHealth(nvlinks=(port,), status="degraded", reasons=(reason,))}},
    )


def _gpus(result: object) -> tuple[int, ...]:
    assert isinstance(result, Decision), getattr(result, "message", result)
    return tuple(result.placement.gpus)


def test_a_degraded_pair_counts_as_its_fallback_class_and_a_two_gpu_pod_avoids_it() -> None:
    healthy = _bus(ws4("w"))
    assert _gpus(run(pod("p", gpus=2), [gpu_node("w", healthy)])) == (0, 1)
    sick = _degrade(healthy, 0, 1)
    assert degraded_pairs(sick) == {(0, 1): "NVLink 0–1 degraded: 2,341 CRC errors in 10 min"}
    assert str(effective_link(sick, 0, 1)) == "NODE"  # one NUMA node: PCIe within the socket
    assert str(effective_link(sick, 2, 3)) == "NV4"
    assert _gpus(run(pod("p", gpus=2), [gpu_node("w", sick)])) == (2, 3)
    assert health_notes(sick) == [
        "NVLink 0–1 degraded: 2,341 CRC errors in 10 min (counted as NODE)"
    ]


def test_nvlink_locality_is_refused_when_every_nvlink_pair_is_degraded() -> None:
    sick = _degrade(_degrade(_bus(ws4("w")), 0, 1), 2, 3)
    result = run(
        pod("p", gpus=2, annotations={"topos.io/gpu-locality": "nvlink"}), [gpu_node("w", sick)]
    )
    assert isinstance(result, Failure), result
    # without the locality the pod still runs, over the fallback class
    assert len(_gpus(run(pod("p", gpus=2), [gpu_node("w", sick)]))) == 2


def test_a_degraded_port_to_an_nvswitch_degrades_every_pair_of_that_gpu() -> None:
    sick = _degrade(_bus(dgx_h100("h")), 3, None)
    pairs = degraded_pairs(sick)
    assert set(pairs) == {(min(3, j), max(3, j)) for j in range(8) if j != 3}
    got = _gpus(run(pod("p", gpus=8 - 1), [gpu_node("h", sick)]))
    assert 3 not in got  # seven GPUs fit on the seven whose NVSwitch links are clean


def test_a_flapping_port_is_a_degraded_pair_with_its_own_reason() -> None:
    flap = "NVLink 0 (to 00000000:02:00.0) flapping: 4 up/down changes in 10 min"
    sick = _degrade(_bus(ws4("w")), 0, 1, reason=flap)
    assert degraded_pairs(sick)[(0, 1)] == "NVLink 0–1 flapping: 4 up/down changes in 10 min"
    assert _gpus(run(pod("p", gpus=2), [gpu_node("w", sick)])) == (2, 3)


def test_a_port_judged_ok_changes_nothing() -> None:
    topo = _bus(ws4("w"))
    seen_once = NvLinkHealth(
        link=0, up=False, peer_bus_id=None, reason="NVLink 0 down (seen 1 of 2 cycles)"
    )
    topo = _with(topo, g0={"health": GpuHealth(nvlinks=(seen_once,))})
    assert degraded_pairs(topo) == {}
    assert _gpus(run(pod("p", gpus=2), [gpu_node("w", topo)])) == (0, 1)


def test_a_downtrained_pcie_link_lowers_the_node_for_multi_gpu_pods_only() -> None:
    good = gpu_node("a-good", dgx_h100("a-good"))
    narrow = {
        f"g{i}": {"pcie_width_max": 16, "pcie_width_current": 8, "pcie_gen_current": 5}
        for i in range(8)
    }
    bad = gpu_node("a-bad", _with(dgx_h100("a-bad"), **narrow))
    two = run(pod("p", gpus=2), [bad, good])
    assert isinstance(two, Decision)
    assert two.node == "a-good"
    scores = {n: v.scores.get("InterconnectHealth") for n, v in two.verdicts.items()}
    assert scores["a-bad"] is not None
    assert scores["a-good"] is not None
    assert scores["a-bad"] < scores["a-good"]
    one = run(pod("q", gpus=1), [bad, good])
    assert isinstance(one, Decision)
    assert "InterconnectHealth" not in one.verdicts[one.node].scores
    assert "GPU 0 PCIe link trained to x8 Gen5 of x16" in health_notes(bad.topology)  # type: ignore[arg-type]


def test_a_degraded_fabric_lowers_the_node_for_gang_members() -> None:
    fabric = GpuFabric(state="completed", cluster_uuid="c", clique_id=1, degraded_bandwidth=True)
    sick = {f"g{i}": {"health": GpuHealth(fabric=fabric, status="degraded")} for i in range(8)}
    bad = gpu_node("a-bad", _with(dgx_h100("a-bad"), **sick))
    good = gpu_node("b-good", dgx_h100("b-good"))
    member = pod("m", gpus=8, gang=("g", 2))
    result = run(member, [bad, good])
    assert isinstance(result, Decision)
    scores = {n: v.scores.get("InterconnectHealth") for n, v in result.verdicts.items()}
    assert scores["a-bad"] is not None
    assert scores["b-good"] is not None
    assert scores["a-bad"] < scores["b-good"]
    assert any("fabric bandwidth degraded" in n for n in health_notes(bad.topology))  # type: ignore[arg-type]


def test_an_unhealthy_gpu_is_never_offered_and_said_why() -> None:
    why = "2 uncorrected ECC errors since the driver loaded"
    topo = _with(
        ws4("w"),
        g2={"healthy": False, "health": GpuHealth(status="unhealthy", reasons=(why,))},
    )
    got = _gpus(run(pod("p", gpus=3), [gpu_node("w", topo)]))
    assert 2 not in got
    assert run(pod("p", gpus=4), [gpu_node("w", topo)]).__class__ is Failure
    assert f"GPU 2 not offered: {why}" in health_notes(topo)


def test_the_scheduled_message_and_the_what_if_say_what_health_changed() -> None:
    sick = _degrade(_bus(ws4("w")), 0, 1)
    node = gpu_node("w", sick)
    decision = run(pod("p", gpus=2), [node])
    assert isinstance(decision, Decision)
    message = scheduled_message(PodRef("default", "p", "u"), decision, sick)
    assert "GPUs 2,3 NVLink" in message
    assert "NVLink 0–1 degraded: 2,341 CRC errors in 10 min (counted as NODE)" in message
    answer = placement_of(decision, Snapshot([node]), None)
    assert answer.link == "NVLink"
    assert answer.health == ["NVLink 0–1 degraded: 2,341 CRC errors in 10 min (counted as NODE)"]


def test_nodes_whose_counters_differ_still_share_results_but_a_degraded_pair_does_not() -> None:
    def counted(host: str, crc: int, status: str = "ok") -> NodeTopology:
        port = NvLinkHealth(link=0, peer_bus_id="00000000:02:00.0", crc_errors=crc, status=status)
        return _with(_bus(ws4(host)), g0={"health": GpuHealth(nvlinks=(port,))})

    a, b = gpu_node("a", counted("a", 5)), gpu_node("b", counted("b", 90_000))
    assert a.state_key is b.state_key  # raw counters are not what placement reads
    c = gpu_node("c", counted("c", 90_000, status="degraded"))
    assert c.state_key is not a.state_key
