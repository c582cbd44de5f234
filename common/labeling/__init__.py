"""Labels and annotations for a Node, computed from one topology snapshot.

One small pure labeler per concern (``gpu``, ``topology``, ``mig``, ``numa``, ``driver``,
``health``, ``describe``) plus the compatibility sets (``gfd``, ``neuronetes``, ``kubenexus``),
each switchable with ``LabelingSettings``. ``labels(snapshot, settings)`` runs them in order and
merges the results, later wins.

Everything here is pure and depends only on ``common``, so both programs use the same labelers:
the agent publishes their output on its Node (``agent.publish``), and the trace simulator
(``coordinator.sim.cluster``) gives each simulated node the labels its agent would publish.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.labeling.base import Labeler
from common.labeling.describe import describe
from common.labeling.driver import driver
from common.labeling.gfd import MIG_STRATEGIES, MigStrategy, gfd
from common.labeling.gpu import count, family, memory, product
from common.labeling.health import health
from common.labeling.kubenexus import kubenexus
from common.labeling.mig import mig
from common.labeling.neuronetes import neuronetes
from common.labeling.numa import numa
from common.labeling.topology import link_class
from common.labels import NodeLabels, merge
from common.model import NodeTopology

COMPAT_SETS: tuple[str, ...] = ("gfd", "neuronetes", "kubenexus")
_STRATEGIES: dict[str, MigStrategy] = {s: s for s in MIG_STRATEGIES}


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelingSettings:
    """Which label sets the agent writes."""

    gfd: bool = True
    """NVIDIA GPU Feature Discovery names (``nvidia.com/gpu.product``, …). Turn off where GFD
    itself runs, so the two do not take turns rewriting the same keys."""
    gfd_mig_strategy: MigStrategy = "mixed"
    """GFD's MIG strategy: ``none``, ``single`` or ``mixed`` (the names docs/design.md §4
    schedules)."""
    neuronetes: bool = True
    """NeuroNetes names (``neuronetes.io/gpu-type``, …)."""
    kubenexus: bool = True
    """KubeNexus NUMA names (``numa.kubenexus.io/node-<i>-cpus``, …)."""

    def __post_init__(self) -> None:
        if self.gfd_mig_strategy not in MIG_STRATEGIES:
            raise ValueError(
                f"unknown MIG strategy {self.gfd_mig_strategy!r}; expected none, single or mixed"
            )

    @classmethod
    def from_compat(cls, names: str, *, gfd_mig_strategy: str = "mixed") -> LabelingSettings:
        """``"gfd,kubenexus"`` → those sets on, the others off; ``""``/``"none"`` → all off."""
        wanted = {n.strip() for n in names.split(",") if n.strip()} - {"none"}
        unknown = wanted - set(COMPAT_SETS)
        if unknown:
            raise ValueError(
                f"unknown label set(s) {', '.join(sorted(unknown))}; "
                f"expected some of {', '.join(COMPAT_SETS)} or none"
            )
        if gfd_mig_strategy not in MIG_STRATEGIES:
            raise ValueError(
                f"unknown MIG strategy {gfd_mig_strategy!r}; expected none, single or mixed"
            )
        strategy = _STRATEGIES[gfd_mig_strategy]
        return cls(
            gfd="gfd" in wanted,
            gfd_mig_strategy=strategy,
            neuronetes="neuronetes" in wanted,
            kubenexus="kubenexus" in wanted,
        )


CORE_LABELERS: tuple[Labeler, ...] = (
    product,
    count,
    memory,
    family,
    link_class,
    mig,
    numa,
    driver,
    health,
    describe,
)


def labelers(settings: LabelingSettings) -> tuple[Labeler, ...]:
    """The labelers to run, in merge order."""
    chosen: list[Labeler] = list(CORE_LABELERS)
    if settings.gfd:
        chosen.append(gfd(settings.gfd_mig_strategy))
    if settings.neuronetes:
        chosen.append(neuronetes)
    if settings.kubenexus:
        chosen.append(kubenexus)
    return tuple(chosen)


def labels(snapshot: NodeTopology, settings: LabelingSettings | None = None) -> NodeLabels:
    """Everything the agent wants on its Node for this snapshot."""
    return merge(labeler(snapshot) for labeler in labelers(settings or LabelingSettings()))


__all__ = ["COMPAT_SETS", "Labeler", "LabelingSettings", "labelers", "labels"]
