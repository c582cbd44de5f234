"""Hardware faults injected into a replay while it runs (:attr:`ReplaySettings.faults`).

A :class:`Fault` happens at a simulated time on one GPU of one node:

- ``link`` — one NVLink port of the GPU starts logging CRC errors and the agent judges it
  degraded (on a direct-NVLink node the port to one NVLink peer; on an NVSwitch node its port to
  a switch, which slows every pair of that GPU: ``common/linkhealth.py``);
- ``gpu`` — the GPU fails (XID 79: fallen off the bus): it is lost, and the pods on it fail.

:func:`with_fault` returns the node's topology as its agent then reports it; the replay sends the
changed GPU to the inventory as the agent's delta would. :func:`random_faults` draws a seeded set:
a share of the nodes gets a degraded link at a random time, and some of those GPUs then fail
(NVLink errors often precede a GPU falling off the bus: the injected precursor), others fail
without warning.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec

from common.model import GpuHealth, NodeTopology, NvLinkHealth
from coordinator.core.snapshot.nodeinfo import NodeInfo

__all__ = ["Fault", "random_faults", "with_fault"]

LINK_REASON = "NVLink 0 degraded: 2,341 CRC errors in 10 min"
GPU_REASON = "XID 79 (GPU has fallen off the bus)"


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float
    node: str
    gpu: int
    kind: Literal["link", "gpu"]


def with_fault(topology: NodeTopology, fault: Fault) -> NodeTopology:
    """``topology`` after ``fault``, as the agent reports it (a second fault on a GPU keeps the
    first one's verdicts)."""
    gpus = list(topology.gpus)
    if not 0 <= fault.gpu < len(gpus):
        raise ValueError(f"fault on {fault.node}: GPU {fault.gpu} does not exist")
    gpu = gpus[fault.gpu]
    old = gpu.health or GpuHealth()
    if fault.kind == "gpu":
        health = msgspec.structs.replace(
            old, status="unhealthy", reasons=(*old.reasons, GPU_REASON), xids=(*old.xids, 79)
        )
        gpus[fault.gpu] = msgspec.structs.replace(
            gpu, healthy=False, health_reason=GPU_REASON, health=health
        )
    else:
        peer = None if topology.nvswitch else _nvlink_peer(topology, fault.gpu)
        port = NvLinkHealth(
            link=0, peer_bus_id=peer, status="degraded", reason=LINK_REASON, crc_in_window=2341
        )
        status = "unhealthy" if old.status == "unhealthy" else "degraded"
        health = msgspec.structs.replace(
            old, nvlinks=(port,), status=status, reasons=(*old.reasons, LINK_REASON)
        )
        gpus[fault.gpu] = msgspec.structs.replace(gpu, health=health)
    return msgspec.structs.replace(topology, gpus=tuple(gpus))


def _nvlink_peer(topology: NodeTopology, i: int) -> str | None:
    """The bus id of the GPU ``i``'s widest NVLink peer (its lowest index among equals)."""
    peers = [(-topology.link(i, j).nvlinks, j) for j in range(len(topology.gpus)) if j != i]
    peers = [p for p in peers if p[0] < 0]
    if not peers:
        return None
    return topology.gpus[min(peers)[1]].pci_bus_id


def random_faults(
    nodes: Sequence[NodeInfo],
    *,
    seed: int,
    horizon_s: float,
    link_share: float = 0.25,
    then_fail: float = 0.5,
    sudden_share: float = 0.05,
    warning_s: tuple[float, float] = (1800.0, 14400.0),
) -> tuple[Fault, ...]:
    """Seeded faults within ``(0, horizon_s)``: on ``link_share`` of the multi-GPU nodes a GPU's
    NVLink degrades; ``then_fail`` of those GPUs fail ``warning_s`` later (uniform); on
    ``sudden_share`` of the nodes a GPU fails with no warning."""
    rng = random.Random(seed)
    out: list[Fault] = []
    for n in nodes:
        topology = n.topology
        if topology is None or len(topology.gpus) < 2:
            continue
        if rng.random() < link_share:
            gpu = _linked_gpu(topology, rng)
            at = rng.uniform(0.0, horizon_s)
            out.append(Fault(at, n.name, gpu, "link"))
            if rng.random() < then_fail:
                out.append(Fault(at + rng.uniform(*warning_s), n.name, gpu, "gpu"))
        if rng.random() < sudden_share:
            gpu = rng.randrange(len(topology.gpus))
            out.append(Fault(rng.uniform(0.0, horizon_s), n.name, gpu, "gpu"))
    return tuple(sorted(out, key=lambda f: (f.at_s, f.node, f.gpu)))


def _linked_gpu(topology: NodeTopology, rng: random.Random) -> int:
    """A GPU with an NVLink to some peer (an NVSwitch node: any GPU)."""
    if topology.nvswitch:
        return rng.randrange(len(topology.gpus))
    linked = [
        i
        for i in range(len(topology.gpus))
        if any(topology.link(i, j).nvlinks for j in range(len(topology.gpus)) if j != i)
    ]
    return rng.choice(linked) if linked else rng.randrange(len(topology.gpus))
