"""Whether this machine has a working NVIDIA driver (real NVML), for the tests of what a user
sees without one."""

from __future__ import annotations

import pynvml


def real_nvml_loads() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True
