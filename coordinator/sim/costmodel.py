"""The communication-cost model: how much longer a job runs on a worse placement.

A trace's ``duration_s`` is the job's run time on an ideal placement (every pod's GPUs joined by
NVLink/NVSwitch, the whole gang on one node). A real placement stretches it::

    modelled run time = duration_s × link_factor(worst link inside any pod)
                                   × network_factor(span of the gang)

``link_factor`` by the worst ``nvidia-smi topo -m`` class among one pod's GPUs (a pod with one GPU
or a MIG instance has no intra-pod traffic: 1.0):

=========  ======  ==============================================================
NV (any)   1.00    NVLink / NVSwitch
PIX        1.10    one PCIe switch: full PCIe bandwidth, peer-to-peer works
PXB        1.15    several PCIe switches
PHB        1.25    through the CPU's root complex (no peer-to-peer)
NODE       1.25    across root complexes inside one NUMA node
SYS        1.40    across the inter-socket link
=========  ======  ==============================================================

``network_factor`` by where the gang's pods sit (single pods: 1.0):

========  ======  ==================================================================
node      1.00    all pods on one node (NVLink between them)
leaf      1.10    several nodes under one leaf switch (one hop, non-blocking)
spine     1.25    several leaves under one spine (oversubscribed uplinks)
cluster   1.50    several spines, or nodes whose leaf is not labelled
========  ======  ==================================================================

The factors are deliberately simple: they reflect the ordering of bandwidths (NVLink ≫ PCIe
switch > host bridge > inter-socket; leaf-local > cross-leaf > cross-spine) for a data-parallel
training job that spends a moderate share of its time in all-reduce, not a measurement of any
particular model. They are configurable per cluster (``costModel:`` in the cluster file), so a
user can plug in their own measured ratios; the relative comparison between policies is what the
simulator reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "DEFAULT_LINK",
    "DEFAULT_NETWORK",
    "CostModel",
    "CostModelError",
    "cost_model_from",
]

DEFAULT_LINK: Final[Mapping[str, float]] = {
    "X": 1.0,
    "NV": 1.0,
    "PIX": 1.10,
    "PXB": 1.15,
    "PHB": 1.25,
    "NODE": 1.25,
    "SYS": 1.40,
}
DEFAULT_NETWORK: Final[Mapping[str, float]] = {
    "node": 1.0,
    "leaf": 1.10,
    "spine": 1.25,
    "cluster": 1.50,
}


class CostModelError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class CostModel:
    link: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_LINK))
    network: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_NETWORK))

    def stretch(self, worst_link: str, span: str) -> float:
        """Run-time multiplier for a job whose worst intra-pod link is ``worst_link`` (a link
        kind: ``NV``, ``PIX`` …) and whose pods span ``span`` (``node`` … ``cluster``)."""
        return self.link[worst_link] * self.network[span]


def _factors(raw: object, defaults: Mapping[str, float], what: str) -> dict[str, float]:
    out = dict(defaults)
    if raw is None:
        return out
    if not isinstance(raw, Mapping):
        raise CostModelError(f"{what} must be a mapping of class → factor")
    for key, value in raw.items():
        if key not in defaults:
            raise CostModelError(f"{what}: unknown class {key!r} (known: {', '.join(defaults)})")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= 100:
            raise CostModelError(f"{what}.{key} must be a number between 1 and 100, not {value!r}")
        out[key] = float(value)
    return out


def cost_model_from(raw: object) -> CostModel:
    if raw is None:
        return CostModel()
    if not isinstance(raw, Mapping):
        raise CostModelError("must be a mapping with 'link' and/or 'network'")
    for key in raw:
        if key not in ("link", "network"):
            raise CostModelError(f"unknown key {key!r} (link, network)")
    return CostModel(
        link=_factors(raw.get("link"), DEFAULT_LINK, "link"),
        network=_factors(raw.get("network"), DEFAULT_NETWORK, "network"),
    )
