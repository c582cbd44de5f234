"""Asking NVML for one GPU's facts without letting a refusal end the discovery.

``Probe`` calls a ``pynvml`` function by name; a refusal (NotSupported, NoPermission, a function
the binding lacks, …) becomes ``None`` and is remembered, and GPU_IS_LOST marks the GPU lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def as_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    return str(value)


def norm_bus(bus: Any) -> str:
    """``0000:07:00.0`` / ``00000000:07:00.0`` / bytes → ``00000000:07:00.0``."""
    text = as_text(bus).strip()
    domain, _, rest = text.partition(":")
    try:
        return f"{int(domain, 16):08X}:{rest.upper()}"
    except ValueError:
        return text.upper()


@dataclass
class Probe:
    """Calls NVML for one GPU, remembering whether it answered GPU_IS_LOST."""

    nvml: Any
    lost: bool = False
    errors: list[str] = field(default_factory=list)

    def __call__(self, function: str, *args: Any) -> Any:
        fn: Callable[..., Any] | None = getattr(self.nvml, function, None)
        if fn is None:
            self.errors.append(f"{function}: not in this NVML binding")
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if isinstance(exc, self.nvml.NVMLError_GpuIsLost):
                self.lost = True
            self.errors.append(f"{function}: {exc}")
            return None

    def raising(self, function: str, *args: Any) -> Any:
        """Like a call, but lets the NVMLError through (for callers that branch on it)."""
        fn: Callable[..., Any] | None = getattr(self.nvml, function, None)
        if fn is None:
            raise self.nvml.NVMLError(self.nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if isinstance(exc, self.nvml.NVMLError_GpuIsLost):
                self.lost = True
            raise
