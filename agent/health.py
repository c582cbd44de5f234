"""GPU health from NVML events: XID errors and lost GPUs mark that GPU unhealthy.

NVML reports trouble as events (``nvmlEventSetWait``), not as a state discovery could read, so the
agent keeps a ``HealthLedger``: which GPUs an event condemned and why. Every snapshot is passed
through it before labelling and streaming. A condemned GPU stays unhealthy until the agent
restarts — a GPU that fell off the bus or hit a double-bit ECC error needs a reset (and the agent
pod is restarted by whoever resets it), so a later quiet period proves nothing.

``NvmlEventWatcher`` waits for events in a worker thread (``nvmlEventSetWait`` blocks), one short
wait at a time so that stopping is prompt. It works unchanged against the real ``pynvml`` module
and the profile-driven fake NVML, whose ``inject_event`` makes ``nvmlEventSetWait`` return an
event as the driver would.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from common.model import NodeTopology

log = logging.getLogger("topos.agent.health")

# XIDs caused by the application, not the GPU (the NVIDIA device plugin skips the same ones):
# 13 graphics engine exception, 31 memory page fault, 43 GPU stopped processing,
# 45 preemptive cleanup, 68 video processor exception, 109 context switch timeout.
APPLICATION_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})

# nvmlEventType values (nvml.h); fetched from the NVML module when it names them.
_XID_CRITICAL: Final = 0x0000000000000008
_DOUBLE_BIT_ECC: Final = 0x0000000000000002


@dataclass(frozen=True, slots=True)
class GpuEvent:
    """Something NVML said about one GPU."""

    uuid: str
    reason: str  # "XID 79", "GPU lost", "double-bit ECC error"
    xid: int | None = None

    @property
    def fatal(self) -> bool:
        return self.xid is None or self.xid not in APPLICATION_XIDS


class HealthLedger:
    """GPUs that NVML events have marked unhealthy, with the first reason seen."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}

    def record(self, event: GpuEvent) -> bool:
        """Note a fatal event; ``True`` when this changed a GPU's health."""
        if not event.fatal or event.uuid in self._reasons:
            return False
        self._reasons[event.uuid] = event.reason
        return True

    @property
    def unhealthy(self) -> dict[str, str]:
        return dict(self._reasons)

    def apply(self, topology: NodeTopology) -> NodeTopology:
        """The snapshot with every condemned GPU marked unhealthy (others untouched)."""
        if not self._reasons:
            return topology
        gpus = tuple(
            msgspec.structs.replace(gpu, healthy=False, health_reason=self._reasons[gpu.uuid])
            if gpu.uuid in self._reasons and gpu.healthy
            else gpu
            for gpu in topology.gpus
        )
        return msgspec.structs.replace(topology, gpus=gpus)


def _key(handle: Any) -> Any:
    """A dict key for a device handle: the real pynvml's handles are ctypes pointers, which are
    unhashable and differ per call, so they are keyed by the address they point at."""
    try:
        hash(handle)
    except TypeError:
        return ("address", ctypes.cast(handle, ctypes.c_void_p).value)
    return handle


def _is(exc: BaseException, nvml: Any, name: str) -> bool:
    cls = getattr(nvml, name, None)
    return isinstance(cls, type) and isinstance(exc, cls)


class NvmlEventWatcher:
    """Registers for critical events on every GPU and turns them into ``GpuEvent``s."""

    def __init__(self, nvml: Any, *, wait_ms: int = 500) -> None:
        self._nvml = nvml
        self._wait_ms = wait_ms
        self._set: Any = None
        self._uuids: dict[Any, str] = {}  # device handle (see _key) → UUID
        self._handles: list[tuple[Any, str]] = []
        self._stopping = False
        self._initialized = False
        self.opened = threading.Event()
        """Set once every GPU is registered (events from then on are delivered)."""

    def open(self) -> int:
        """Create the event set and register every GPU that supports events (blocking).

        Returns how many GPUs are watched; GPUs that refuse (NotSupported) are skipped.
        """
        nvml = self._nvml
        nvml.nvmlInit()  # reference-counted: discovery's own init/shutdown pairs are unaffected
        self._initialized = True
        self._set = nvml.nvmlEventSetCreate()
        kinds = getattr(nvml, "nvmlEventTypeXidCriticalError", _XID_CRITICAL) | getattr(
            nvml, "nvmlEventTypeDoubleBitEccError", _DOUBLE_BIT_ECC
        )
        watched = 0
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            self._uuids[_key(handle)] = uuid
            self._handles.append((handle, uuid))
            try:
                nvml.nvmlDeviceRegisterEvents(handle, kinds, self._set)
            except Exception as exc:
                if _is(exc, nvml, "NVMLError_NotSupported"):
                    log.info("GPU does not report events", extra={"gpu": uuid})
                    continue
                raise
            watched += 1
        self.opened.set()
        return watched

    def wait_once(self) -> GpuEvent | None:
        """Wait up to ``wait_ms`` for one event (blocking; run it in a thread)."""
        nvml = self._nvml
        try:
            data = nvml.nvmlEventSetWait(self._set, self._wait_ms)
        except Exception as exc:
            if _is(exc, nvml, "NVMLError_Timeout"):
                return None
            if _is(exc, nvml, "NVMLError_GpuIsLost"):
                # NVML can't say which; every watched GPU is suspect only if it is really gone,
                # so report the GPUs whose handles no longer answer.
                return self._find_lost()
            raise
        uuid = self._uuids.get(_key(data.device))
        if uuid is None:
            try:
                raw = nvml.nvmlDeviceGetUUID(data.device)
                uuid = raw.decode() if isinstance(raw, bytes) else str(raw)
            except Exception:
                uuid = "unknown"
        if data.eventType & getattr(nvml, "nvmlEventTypeXidCriticalError", _XID_CRITICAL):
            xid = int(data.eventData)
            return GpuEvent(uuid=uuid, reason=f"XID {xid}", xid=xid)
        return GpuEvent(uuid=uuid, reason="double-bit ECC error")

    def _find_lost(self) -> GpuEvent | None:
        for handle, uuid in self._handles:
            try:
                self._nvml.nvmlDeviceGetUUID(handle)
            except Exception as exc:
                if _is(exc, self._nvml, "NVMLError_GpuIsLost"):
                    return GpuEvent(uuid=uuid, reason="GPU lost")
        return None

    def close(self) -> None:
        if self._set is not None:
            try:
                self._nvml.nvmlEventSetFree(self._set)
            except Exception as exc:  # best effort at shutdown
                log.debug("nvmlEventSetFree failed", extra={"error": str(exc)})
            self._set = None
        if self._initialized:
            self._initialized = False
            try:
                self._nvml.nvmlShutdown()
            except Exception as exc:
                log.debug("nvmlShutdown failed", extra={"error": str(exc)})

    def stop(self) -> None:
        self._stopping = True

    async def run(self, on_event: Callable[[GpuEvent], Awaitable[None]]) -> None:
        """Deliver events until ``stop()`` (or cancellation); each wait runs in a thread."""
        try:
            await asyncio.to_thread(self.open)
            while not self._stopping:
                event = await asyncio.to_thread(self.wait_once)
                if event is not None:
                    await on_event(event)
        finally:
            await asyncio.to_thread(self.close)
