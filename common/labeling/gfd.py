"""NVIDIA GPU Feature Discovery compatible labels (``nvidia.com/*``).

Existing manifests select nodes with GFD's names (``nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB``,
``nvidia.com/mig-1g.10gb.count``); Topos writes the same names with the same meaning, so they keep
working without GFD. The MIG strategy follows GFD's:

``none``    no MIG labels beyond ``mig.capable``;
``single``  every GPU split into identical instances: ``gpu.product`` gains ``-MIG-<profile>``,
            ``gpu.count``/``gpu.memory`` describe the instances; anything else is ``-MIG-INVALID``;
``mixed``   one ``nvidia.com/mig-<profile>.{count,memory,slices.gi}`` group per instance profile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from common import labels as L
from common.labeling import facts
from common.labels import LabelBuilder, NodeLabels
from common.model import NodeTopology, gpu_family

MigStrategy = Literal["none", "single", "mixed"]
MIG_STRATEGIES: tuple[MigStrategy, ...] = ("none", "single", "mixed")


def _first_product(topology: NodeTopology) -> str | None:
    # GFD labels the node with its first GPU's product.
    return topology.gpus[0].product if topology.gpus else None


def _base(topology: NodeTopology, b: LabelBuilder) -> None:
    b.text(L.GFD_GPU_PRODUCT, _first_product(topology))
    b.number(L.GFD_GPU_COUNT, len(topology.gpus))
    b.number(L.GFD_GPU_MEMORY, facts.smallest_memory_mib(topology))
    cc = facts.compute_capability(topology)
    b.exact(L.GFD_GPU_FAMILY, gpu_family(cc))
    major, _, minor = (cc or "").partition(".")
    b.exact(L.GFD_COMPUTE_MAJOR, major or None)
    b.exact(L.GFD_COMPUTE_MINOR, minor or None)
    b.flag(L.GFD_MIG_CAPABLE, facts.mig_capable(topology))
    driver = (topology.driver_version or "").split(".")
    b.exact(L.GFD_DRIVER_MAJOR, driver[0] or None)
    b.exact(L.GFD_DRIVER_MINOR, driver[1] if len(driver) > 1 else None)
    if len(driver) > 2:
        b.exact(L.GFD_DRIVER_REV, driver[2])
    cuda = (topology.cuda_version or "").split(".")
    b.exact(L.GFD_RUNTIME_MAJOR, cuda[0] or None)
    b.exact(L.GFD_RUNTIME_MINOR, cuda[1] if len(cuda) > 1 else None)
    clique = _clique(topology)
    if clique is not None:
        b.exact(L.GFD_GPU_CLIQUE, clique)


def _clique(topology: NodeTopology) -> str | None:
    """The NVLink clique every GPU with fabric info agrees on (GFD's ``gpu.clique``); ``None``
    when there is none or the GPUs disagree (a tray half-registered: no label is safer)."""
    cliques = {
        g.health.fabric.clique
        for g in topology.gpus
        if g.health is not None and g.health.fabric is not None
    }
    return cliques.pop() if len(cliques) == 1 else None


def _single(topology: NodeTopology, b: LabelBuilder) -> None:
    b.exact(L.GFD_MIG_STRATEGY, "single")
    if not facts.mig_enabled(topology):
        return  # no MIG on the node: the full-GPU labels stand
    instances = [inst for gpu in topology.gpus for inst in gpu.mig_instances]
    profiles = {inst.profile for inst in instances}
    all_enabled = all(gpu.mig_enabled for gpu in topology.gpus)
    product = _first_product(topology) or "unknown"
    if not all_enabled or len(profiles) != 1:
        b.text(L.GFD_GPU_PRODUCT, f"{product}-MIG-INVALID")
        b.number(L.GFD_GPU_COUNT, 0)
        b.number(L.GFD_GPU_MEMORY, 0)
        return
    inst = instances[0]
    b.text(L.GFD_GPU_PRODUCT, f"{product}-MIG-{inst.profile}")
    b.number(L.GFD_GPU_COUNT, len(instances))
    b.number(L.GFD_GPU_MEMORY, inst.memory_mib)
    b.number(L.GFD_PREFIX + "gpu.slices.gi", inst.slices)


def _mixed(topology: NodeTopology, b: LabelBuilder) -> None:
    b.exact(L.GFD_MIG_STRATEGY, "mixed")
    seen: dict[str, tuple[int, int]] = {}
    counts = facts.mig_instances_by_profile(topology)
    for gpu in topology.gpus:
        for inst in gpu.mig_instances:
            seen[inst.profile] = (inst.memory_mib, inst.slices)
    for profile, n in counts.items():
        memory, slices = seen[profile]
        b.number(L.gfd_mig_key(profile, "count"), n)
        b.number(L.gfd_mig_key(profile, "memory"), memory)
        b.number(L.gfd_mig_key(profile, "slices.gi"), slices)


def gfd(strategy: MigStrategy) -> Callable[[NodeTopology], NodeLabels]:
    """The GFD labeler for one MIG strategy."""
    if strategy not in MIG_STRATEGIES:
        raise ValueError(f"unknown MIG strategy {strategy!r}; expected none, single or mixed")

    def labeler(topology: NodeTopology) -> NodeLabels:
        b = LabelBuilder()
        _base(topology, b)
        if strategy == "single":
            _single(topology, b)
        elif strategy == "mixed":
            _mixed(topology, b)
        return b.build()

    labeler.__name__ = f"gfd_{strategy}"
    return labeler
