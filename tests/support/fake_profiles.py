"""Small inline hardware profiles for the fake NVML (the built-in catalogue has the big ones)."""

from __future__ import annotations

from typing import Any

TWO_L40S: dict[str, Any] = {
    "name": "two-l40s",
    "hostname": "box",
    "driver_version": "550.54.15",
    "cuda_version": "12.4",
    "numa_nodes": [{"id": 0, "cpus": "0-15", "memory_mib": 65536}],
    "gpus": [
        {"product": "NVIDIA L40S", "memory_mib": 46068, "compute_capability": "8.9",
         "cpu_affinity": "0-15", "numa_affinity": "0"},
        {"product": "NVIDIA L40S", "memory_mib": 46068, "compute_capability": "8.9",
         "cpu_affinity": "0-15", "numa_affinity": "0"},
    ],
    "links": ["X PHB", "PHB X"],
}  # fmt: skip
