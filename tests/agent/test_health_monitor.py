"""The agent's health verdict from NVML readings: windows, resets, debouncing, thresholds."""

from __future__ import annotations

import msgspec
import pytest

from agent.health_monitor import HealthMonitor, HealthThresholds, ThresholdError, summary
from agent.settings import AgentError, load_thresholds
from common.model import Gpu, GpuFabric, GpuHealth, NodeTopology, NvLinkHealth


def _node(*healths: GpuHealth | None, width: tuple[int, int] = (16, 16)) -> NodeTopology:
    n = len(healths)
    gpus = tuple(
        Gpu(
            index=i,
            uuid=f"GPU-{i}",
            health=h,
            pcie_width_current=width[0],
            pcie_width_max=width[1],
            pcie_gen_current=4,
        )
        for i, h in enumerate(healths)
    )
    links = tuple(tuple("X" if i == j else "NV4" for j in range(n)) for i in range(n))
    return NodeTopology(hostname="n", gpus=gpus, links=links)


def _link(crc: int | None = 0, *, up: bool = True, replay: int | None = 0) -> GpuHealth:
    return GpuHealth(
        ecc_corrected=0,
        ecc_uncorrected=0,
        nvlinks=(
            NvLinkHealth(
                link=0,
                up=up,
                peer_bus_id="00000000:E0:00.0",
                crc_errors=crc,
                replay_errors=replay,
                recovery_errors=0 if crc is not None else None,
            ),
        ),
    )


def _health(gpu: Gpu) -> GpuHealth:
    assert gpu.health is not None
    return gpu.health


def _judge(monitor: HealthMonitor, health: GpuHealth | None, now: float, **kw: object) -> Gpu:
    return monitor.observe(_node(health, **kw), now).gpus[0]  # type: ignore[arg-type]


def test_crc_errors_rising_within_the_window_degrade_the_link_then_age_out() -> None:
    monitor = HealthMonitor()
    assert _health(_judge(monitor, _link(100), 0)).status == "ok"
    gpu = _judge(monitor, _link(2441), 60)
    assert _health(gpu).status == "degraded"
    assert _health(gpu).reasons == (
        "NVLink 0 (to 00000000:E0:00.0) degraded: 2,341 CRC errors in 10 min",
    )
    assert _health(gpu).nvlinks[0].crc_in_window == 2341
    assert gpu.healthy  # degraded is still offered; only unhealthy GPUs are withdrawn
    # ten quiet minutes later the burst has left the window
    gpu = _judge(monitor, _link(2441), 60 + 601)
    assert _health(gpu).status == "ok"
    assert _health(gpu).nvlinks == ()  # a quiet port is not published


def test_a_counter_that_goes_back_is_a_reset_not_a_negative_rate() -> None:
    monitor = HealthMonitor()
    _judge(monitor, _link(5000), 0)
    gpu = _judge(monitor, _link(3), 60)
    link = _health(gpu).nvlinks[0]
    assert link.status == "ok"
    assert link.crc_in_window is None  # one reading since the reset: no rate yet
    assert link.reason == (
        "NVLink 0 (to 00000000:E0:00.0) CRC count went back from 5000 to 3 (counter reset);"
        " its window starts again"
    )
    gpu = _judge(monitor, _link(150), 120)  # the window restarted at 3
    assert _health(gpu).nvlinks[0].crc_in_window == 147
    assert _health(gpu).status == "degraded"


def test_a_link_down_for_one_cycle_is_not_a_fault_two_are() -> None:
    monitor = HealthMonitor()
    _judge(monitor, _link(0), 0)
    once = _judge(monitor, _link(0, up=False), 60)
    assert _health(once).status == "ok"
    assert _health(once).nvlinks[0].reason == (
        "NVLink 0 (to 00000000:E0:00.0) down (seen 1 of 2 cycles)"
    )
    twice = _judge(monitor, _link(0, up=False), 120)
    assert _health(twice).status == "degraded"
    assert _health(twice).reasons == ("NVLink 0 (to 00000000:E0:00.0) down for 2 cycles",)


def test_a_flapping_link_is_degraded_even_while_up() -> None:
    monitor = HealthMonitor()
    states = [True, False, True, False, True]
    for k, up in enumerate(states):
        gpu = _judge(monitor, _link(0, up=up), 60.0 * k)
    assert _health(gpu).status == "degraded"
    assert _health(gpu).reasons == (
        "NVLink 0 (to 00000000:E0:00.0) flapping: 4 up/down changes in 10 min",
    )
    # steady for a window: not flapping any more
    gpu = _judge(monitor, _link(0), 60.0 * 4 + 601)
    assert _health(gpu).status == "ok"


def test_not_supported_everywhere_is_judged_on_nothing_and_harms_nothing() -> None:
    """An older GPU or driver: every newer call answered NotSupported (all readings None)."""
    monitor = HealthMonitor()
    bare = GpuHealth(nvlinks=(NvLinkHealth(link=0),))
    for t in (0, 60, 120):
        gpu = _judge(monitor, bare, t)
    assert _health(gpu).status == "ok"
    assert _health(gpu).reasons == ()
    assert gpu.healthy
    # and a GPU that was not read at all (a lost one) stays as discovery left it
    assert _judge(monitor, None, 180).health is None


def test_uncorrected_ecc_makes_the_gpu_unhealthy_and_withdraws_it() -> None:
    gpu = _judge(HealthMonitor(), GpuHealth(ecc_uncorrected=2, remap_failure=True), 0)
    assert _health(gpu).status == "unhealthy"
    assert not gpu.healthy
    assert gpu.health_reason == (
        "2 uncorrected ECC errors since the driver loaded; "
        "row remapping failed (the GPU needs service)"
    )


def test_pcie_downtrained_slowdowns_and_fabric_degrade() -> None:
    health = GpuHealth(
        clocks_event_reasons=("gpu_idle", "hw_thermal"),
        fabric=GpuFabric(state="completed", cluster_uuid="c", clique_id=1, degraded_bandwidth=True),
        retired_pages_pending=True,
    )
    gpu = _judge(HealthMonitor(), health, 0, width=(8, 16))
    assert _health(gpu).status == "degraded"
    assert _health(gpu).reasons == (
        "a page retirement waits for a GPU reset",
        "clocks held down: hw_thermal",
        "PCIe link trained to x8 Gen4 of x16",
        "NVLink fabric bandwidth degraded",
    )
    status, message = summary(msgspec.structs.replace(_node(health), gpus=(gpu,)))
    assert status == "degraded"
    assert message.startswith("GPU0 degraded: a page retirement waits")


def test_xids_from_events_are_listed() -> None:
    monitor = HealthMonitor()
    monitor.record_xid("GPU-0", 79)
    monitor.record_xid("GPU-0", 79)
    gpu = _judge(monitor, GpuHealth(), 0)
    assert _health(gpu).xids == (79,)


def test_thresholds_from_a_mapping_and_bad_input_names_key_and_value() -> None:
    t = HealthThresholds.from_mapping(
        {"window_s": 300, "nvlink_crc_errors": 10, "slowdown_reasons": ["hw_slowdown"]}
    )
    assert (t.window_s, t.nvlink_crc_errors, t.slowdown_reasons) == (300.0, 10, ("hw_slowdown",))
    for bad, words in (
        ({"nvlink_crc": 5}, "unknown key 'nvlink_crc'"),
        ({"nvlink_crc_errors": -1}, "nvlink_crc_errors must be a whole number ≥ 1, not -1"),
        ({"window_s": "ten"}, "window_s must be a positive number, not 'ten'"),
        ({"pcie_width_downtrained": "yes"}, "pcie_width_downtrained must be true or false"),
        ({"slowdown_reasons": ["melting"]}, "slowdown_reasons must be a list of"),
    ):
        with pytest.raises(ThresholdError, match=words):
            HealthThresholds.from_mapping(bad)


def test_threshold_file_errors_are_one_line_agent_errors(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "t.yaml"
    path.write_text("link_flaps: 0\n")
    with pytest.raises(AgentError, match=r"t\.yaml: link_flaps must be a whole number ≥ 1, not 0"):
        load_thresholds(str(path))
    path.write_text("link_flaps: 5\n")
    assert load_thresholds(str(path)).link_flaps == 5
