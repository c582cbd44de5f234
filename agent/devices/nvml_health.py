"""One GPU's health as NVML reports it: ECC, retired pages, row remapping, clock event reasons,
NVLink error counters and the GPU fabric (multi-node NVLink), read every discovery cycle.

Raw readings only (counters since the driver loaded); the agent's ``HealthMonitor`` turns them
into rates and a verdict. Every call goes through the GPU's ``Probe``: a call the GPU or driver
refuses (NotSupported on older GPUs, a function an older driver or binding lacks) leaves that
field ``None``; it is never an error.
"""

from __future__ import annotations

import ctypes
import uuid
from collections.abc import Sequence
from typing import Any, Final

from agent.devices.nvml_links import Port
from agent.devices.nvml_probe import Probe, as_text
from common.model import GpuFabric, GpuHealth, NvLinkHealth

# nvmlNvLinkErrorCounter_t
_REPLAY: Final = 0
_RECOVERY: Final = 1
_CRC_FLIT: Final = 2
_CRC_DATA: Final = 3

# nvmlClocksEventReason* bits, by the names docs/health.md uses
CLOCK_REASONS: Final = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)

_FABRIC_STATES: Final = ("not_supported", "not_started", "in_progress", "completed")
# NVML_GPU_FABRIC_HEALTH_MASK_*: (field, shift); each a 2-bit value, 1 = true, 2 = false
_FABRIC_BITS: Final = (
    ("degraded_bandwidth", 0),
    ("route_recovery", 2),
    ("route_unhealthy", 4),
    ("access_timeout_recovery", 6),
)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def read_health(nvml: Any, probe: Probe, handle: Any, ports: Sequence[Port]) -> GpuHealth:
    """The GPU's health readings; ``ports`` are its NVLink ports as the link walk found them."""
    corrected = probe("nvmlDeviceGetTotalEccErrors", handle, 0, 0)  # corrected, volatile
    uncorrected = None if corrected is None else probe("nvmlDeviceGetTotalEccErrors", handle, 1, 0)
    sbe = probe("nvmlDeviceGetRetiredPages", handle, 0)  # multiple single-bit errors
    dbe = None if sbe is None else probe("nvmlDeviceGetRetiredPages", handle, 1)
    pending = None if sbe is None else probe("nvmlDeviceGetRetiredPagesPendingStatus", handle)
    remap = probe("nvmlDeviceGetRemappedRows", handle)
    reasons = probe("nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:  # bindings and drivers before the rename
        reasons = probe("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    return GpuHealth(
        ecc_corrected=_int(corrected),
        ecc_uncorrected=_int(uncorrected),
        retired_pages_single_bit=None if sbe is None else len(sbe),
        retired_pages_double_bit=None if dbe is None else len(dbe),
        retired_pages_pending=None if pending is None else bool(int(pending)),
        remapped_rows_corrected=None if remap is None else int(remap[0]),
        remapped_rows_uncorrected=None if remap is None else int(remap[1]),
        remap_pending=None if remap is None else bool(int(remap[2])),
        remap_failure=None if remap is None else bool(int(remap[3])),
        clocks_event_reasons=None if reasons is None else clock_reasons(int(reasons)),
        nvlinks=_links(nvml, probe, handle, ports),
        fabric=read_fabric(nvml, probe, handle),
    )


def clock_reasons(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in CLOCK_REASONS if mask & bit)


def _links(nvml: Any, probe: Probe, handle: Any, ports: Sequence[Port]) -> tuple[NvLinkHealth, ...]:
    """Every port's error counters: one ``nvmlDeviceGetFieldValues`` call for the GPU
    (``NVML_FI_DEV_NVLINK_ERROR_DL_*`` with the link as scope), else per-link calls."""
    if not ports:
        return ()
    fields = [
        (int(getattr(nvml, name, code)), port.link)
        for port in ports
        for name, code in (
            ("NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY", 161),
            ("NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY", 162),
            ("NVML_FI_DEV_NVLINK_ERROR_DL_CRC", 163),
        )
    ]
    values = probe("nvmlDeviceGetFieldValues", handle, fields)
    if values is None:
        return tuple(_link(probe, handle, port) for port in ports)
    if all(int(v.nvmlReturn) != 0 for v in values):
        # none answered (Blackwell and later use other fields): try the per-link call
        return tuple(_link(probe, handle, port) for port in ports)

    def value(k: int) -> int | None:
        v = values[k]
        return int(v.value.ullVal) if int(v.nvmlReturn) == 0 else None

    return tuple(
        NvLinkHealth(
            link=port.link,
            up=port.up,
            peer_bus_id=port.peer_bus_id,
            replay_errors=value(3 * k),
            recovery_errors=value(3 * k + 1),
            crc_errors=value(3 * k + 2),
        )
        for k, port in enumerate(ports)
    )


def _link(probe: Probe, handle: Any, port: Port) -> NvLinkHealth:
    def counter(kind: int) -> int | None:
        return _int(probe("nvmlDeviceGetNvLinkErrorCounter", handle, port.link, kind))

    replay = counter(_REPLAY)
    if replay is None:  # no counters on this GPU/driver: ask no more
        return NvLinkHealth(link=port.link, up=port.up, peer_bus_id=port.peer_bus_id)
    flit, data = counter(_CRC_FLIT), counter(_CRC_DATA)
    crc = None if flit is None and data is None else (flit or 0) + (data or 0)
    return NvLinkHealth(
        link=port.link,
        up=port.up,
        peer_bus_id=port.peer_bus_id,
        crc_errors=crc,
        replay_errors=replay,
        recovery_errors=counter(_RECOVERY),
    )


def read_fabric(nvml: Any, probe: Probe, handle: Any) -> GpuFabric | None:
    """``nvmlDeviceGetGpuFabricInfoV`` (with the health mask), else the older
    ``nvmlDeviceGetGpuFabricInfo``; ``None`` where the GPU has no fabric (NotSupported)."""
    info: Any = None
    versioned = False
    v2 = getattr(nvml, "c_nvmlGpuFabricInfo_v2_t", None)
    if v2 is not None and hasattr(nvml, "nvmlDeviceGetGpuFabricInfoV"):
        info = v2()  # its constructor sets the version
        try:
            probe.raising("nvmlDeviceGetGpuFabricInfoV", handle, ctypes.byref(info))
            versioned = True
        except nvml.NVMLError_FunctionNotFound:
            info = None
        except nvml.NVMLError as exc:
            probe.errors.append(f"nvmlDeviceGetGpuFabricInfoV: {exc}")
            return None
    if info is None:
        v1 = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
        if v1 is None:
            return None
        info = v1()
        if probe("nvmlDeviceGetGpuFabricInfo", handle, ctypes.byref(info)) is None:
            return None
    state = int(info.state)
    if state == 0:
        return None
    raw = bytes(info.clusterUuid)
    status = int(info.status)
    mask = int(info.healthMask) if versioned else None
    flags: dict[str, bool | None] = {}
    for name, shift in _FABRIC_BITS:
        value = None if mask is None else (mask >> shift) & 0x3
        flags[name] = None if value in (None, 0) else value == 1
    return GpuFabric(
        state=_FABRIC_STATES[state] if state < len(_FABRIC_STATES) else f"state {state}",
        cluster_uuid=str(uuid.UUID(bytes=raw[:16])) if any(raw) else None,
        clique_id=int(info.cliqueId) if state == 3 else None,
        status="Success" if status == 0 else _error_text(nvml, status),
        health_mask=mask,
        **flags,
    )


def _error_text(nvml: Any, code: int) -> str:
    try:
        return as_text(nvml.nvmlErrorString(code))
    except Exception:  # the binding could not name it
        return f"NVML error {code}"
