"""What the kubelet would advertise as a node's allocatable resources for its hardware, with the
NVIDIA device plugin under the MIG strategy "mixed".

Used wherever a node's resources are derived from its topology instead of read from a Node object:
the inventory (agent without a Node object), the in-memory cluster, the trace simulator and the
devcluster's simulated kubelets. The rules (docs/decisions.md, "Allocatable from topology"):

- ``pods``: 110, the kubelet's default ``maxPods``;
- ``nvidia.com/gpu``: the GPUs *not* in MIG mode; a GPU in MIG mode is no whole GPU;
- ``nvidia.com/mig-<profile>``: one per MIG instance of a GPU in MIG mode, named by the profile
  as the device plugin names it (``1g.10gb``, or ``1c.3g.40gb`` for a compute-instance split);
  instances listed on a GPU with MIG mode off are not devices and count nowhere;
- ``cpu`` (millicores) and ``memory`` (bytes) when the topology knows them;
- a resource with no device is left out, not written as 0 (a CPU node has no ``nvidia.com/gpu``;
  for the scheduler an absent resource and a zero one fit the same pods);
- unhealthy GPUs still count (they are registered devices); their health is applied where
  devices are handed out (the scheduler's free GPUs, the inventory's free count).
"""

from __future__ import annotations

from typing import Final

from common.model import NodeTopology
from common.podkeys import GPU_RESOURCE, MIG_RESOURCE_PREFIX

__all__ = ["KUBELET_MAX_PODS", "allocatable_from_topology"]

KUBELET_MAX_PODS: Final = 110


def allocatable_from_topology(topology: NodeTopology) -> dict[str, int]:
    """The node's allocatable in canonical units: CPU in millicores, memory in bytes, devices
    and ``pods`` in units."""
    out: dict[str, int] = {"pods": KUBELET_MAX_PODS}
    whole = sum(1 for g in topology.gpus if not g.mig_enabled)
    if whole:
        out[GPU_RESOURCE] = whole
    for gpu in topology.gpus:
        if not gpu.mig_enabled:
            continue
        for inst in gpu.mig_instances:
            key = MIG_RESOURCE_PREFIX + inst.profile
            out[key] = out.get(key, 0) + 1
    if topology.cpu_count:
        out["cpu"] = topology.cpu_count * 1000
    if topology.memory_mib:
        out["memory"] = topology.memory_mib * 2**20
    return out
