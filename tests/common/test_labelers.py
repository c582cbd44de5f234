"""The pure labelers over hand-built topologies: NVSwitch, PCIe, MIG, unknown fields, sanitising,
health, and the switchable compatibility sets (GFD, NeuroNetes, KubeNexus)."""

from __future__ import annotations

import msgspec
import pytest

from common import labels as L
from common.labeling import LabelingSettings, labels
from common.labeling.neuronetes import gpu_type
from common.labels import is_label_value
from common.model import NodeTopology, topology_from_json
from tests.support.agent_topologies import (
    MIXED_LAYOUT,
    SEVEN_SMALL,
    mig_node,
    nvswitch_node,
    pcie_node,
    unknown_node,
)

ALL_OFF = LabelingSettings(gfd=False, neuronetes=False, kubenexus=False)


def test_nvswitch_node_topos_labels() -> None:
    out = labels(nvswitch_node(), ALL_OFF)
    assert out.labels == {
        L.GPU_PRODUCT: "NVIDIA-A100-SXM4-40GB",
        L.GPU_COUNT: "8",
        L.GPU_MEMORY: "40960",
        L.GPU_FAMILY: "ampere",
        L.GPU_TOPOLOGY: "nvswitch",
        L.MIG_CAPABLE: "true",
        L.MIG_ENABLED: "false",
        L.NUMA_COUNT: "2",
        L.DRIVER_VERSION: "535.104.05",
        L.CUDA_VERSION: "12.2",
        L.GPU_HEALTHY: "8",
    }
    assert not any(
        k.startswith(("nvidia.com/", "neuronetes.io/", "numa.kubenexus")) for k in out.labels
    )


def test_pcie_node_is_pcie_and_not_mig_capable() -> None:
    out = labels(pcie_node(), ALL_OFF)
    assert out.labels[L.GPU_TOPOLOGY] == "pcie"
    assert out.labels[L.MIG_CAPABLE] == "false"
    assert out.labels[L.GPU_FAMILY] == "ada-lovelace"
    assert out.labels[L.GPU_PRODUCT] == "NVIDIA-L40S"


def test_nvlink_without_switch_is_nvlink() -> None:
    base = pcie_node(2)
    bridged = msgspec.structs.replace(base, links=(("X", "NV4"), ("NV4", "X")))
    assert labels(bridged, ALL_OFF).labels[L.GPU_TOPOLOGY] == "nvlink"


def test_smallest_gpu_memory_is_labelled() -> None:
    topo = nvswitch_node(2)
    small = msgspec.structs.replace(topo.gpus[1], memory_total_mib=20000)
    topo = msgspec.structs.replace(topo, gpus=(topo.gpus[0], small))
    assert labels(topo, ALL_OFF).labels[L.GPU_MEMORY] == "20000"


def test_unknown_fields_are_labelled_unknown() -> None:
    out = labels(unknown_node())
    for key in (
        L.GPU_PRODUCT,
        L.GPU_MEMORY,
        L.GPU_FAMILY,
        L.MIG_CAPABLE,
        L.NUMA_COUNT,
        L.DRIVER_VERSION,
        L.CUDA_VERSION,
        L.GFD_GPU_PRODUCT,
        L.GFD_COMPUTE_MAJOR,
        L.NEURONETES_GPU_TYPE,
        L.NEURONETES_GPU_MEMORY,
        L.KUBENEXUS_NODE_COUNT,
    ):
        assert out.labels[key] == "unknown", key
    assert out.labels[L.GPU_COUNT] == "2"


def test_mixed_products_do_not_pretend_to_be_one() -> None:
    topo = pcie_node(2)
    other = msgspec.structs.replace(topo.gpus[1], product="NVIDIA L4")
    topo = msgspec.structs.replace(topo, gpus=(topo.gpus[0], other))
    out = labels(topo)
    assert out.labels[L.GPU_PRODUCT] == "mixed"
    assert out.labels[L.GFD_GPU_PRODUCT] == "NVIDIA-L40S"  # GFD labels the first GPU
    assert (
        "NVIDIA L40S + NVIDIA L4" in out.annotations[L.SUMMARY]
        or "NVIDIA L4 + NVIDIA L40S" in (out.annotations[L.SUMMARY])
    )


def test_seventy_char_product_is_cut_to_a_legal_label_and_kept_whole_in_an_annotation() -> None:
    name = "NVIDIA Hypothetical Accelerator Extreme Edition With A Very Long Namex"
    assert len(name) == 70
    out = labels(nvswitch_node(2, product=name))
    for key in (L.GPU_PRODUCT, L.GFD_GPU_PRODUCT):
        value = out.labels[key]
        assert is_label_value(value)
        assert len(value) <= 63
        assert value.startswith("NVIDIA-Hypothetical-Accelerator")
        assert out.annotations[key] == name


def test_product_with_illegal_characters() -> None:
    out = labels(nvswitch_node(2, product="Tesla V100 (SXM2) 32GB/HBM2"), ALL_OFF)
    assert out.labels[L.GPU_PRODUCT] == "Tesla-V100-SXM2-32GB-HBM2"
    assert out.annotations[L.GPU_PRODUCT] == "Tesla V100 (SXM2) 32GB/HBM2"


def test_every_label_value_is_legal_on_every_topology() -> None:
    topologies = [
        nvswitch_node(),
        pcie_node(),
        mig_node((SEVEN_SMALL, MIXED_LAYOUT, ())),
        unknown_node(),
    ]
    for strategy in ("none", "single", "mixed"):
        settings = LabelingSettings(gfd_mig_strategy=strategy)  # type: ignore[arg-type]
        for topo in topologies:
            out = labels(topo, settings)
            assert all(is_label_value(v) for v in out.labels.values())


def test_mig_labels_and_layout() -> None:
    topo = mig_node((SEVEN_SMALL, MIXED_LAYOUT, ()))
    out = labels(topo)
    assert out.labels[L.MIG_CAPABLE] == "true"
    assert out.labels[L.MIG_ENABLED] == "true"
    assert out.annotations[L.MIG_LAYOUT] == "1g.10gb:8,2g.20gb:1,3g.40gb:1"
    # GFD mixed strategy: one group per instance profile
    assert out.labels[L.GFD_MIG_STRATEGY] == "mixed"
    assert out.labels["nvidia.com/mig-1g.10gb.count"] == "8"
    assert out.labels["nvidia.com/mig-1g.10gb.memory"] == "9728"
    assert out.labels["nvidia.com/mig-3g.40gb.count"] == "1"
    assert out.labels["nvidia.com/mig-3g.40gb.slices.gi"] == "3"
    # NeuroNetes mig-config is not a legal label value: it is an annotation, verbatim
    assert L.NEURONETES_MIG_CONFIG not in out.labels
    assert out.annotations[L.NEURONETES_MIG_CONFIG] == "1g.10gb:8,2g.20gb:1,3g.40gb:1"


def test_mig_disabled_everywhere_has_no_layout() -> None:
    out = labels(mig_node(((), ())))
    assert out.labels[L.MIG_ENABLED] == "false"
    assert L.MIG_LAYOUT not in out.annotations
    assert not any(k.startswith("nvidia.com/mig-") for k in out.labels)
    assert L.NEURONETES_MIG_CONFIG not in out.annotations


def test_gfd_single_strategy_uniform_and_invalid() -> None:
    single = LabelingSettings(gfd_mig_strategy="single")
    uniform = labels(mig_node((SEVEN_SMALL, SEVEN_SMALL)), single)
    assert uniform.labels[L.GFD_GPU_PRODUCT] == "NVIDIA-A100-80GB-PCIe-MIG-1g.10gb"
    assert uniform.labels[L.GFD_GPU_COUNT] == "14"
    assert uniform.labels[L.GFD_GPU_MEMORY] == "9728"
    invalid = labels(mig_node((SEVEN_SMALL, MIXED_LAYOUT)), single)
    assert invalid.labels[L.GFD_GPU_PRODUCT] == "NVIDIA-A100-80GB-PCIe-MIG-INVALID"
    assert invalid.labels[L.GFD_GPU_COUNT] == "0"
    # and MIG on only some GPUs is invalid too
    partial = labels(mig_node((SEVEN_SMALL, ())), single)
    assert partial.labels[L.GFD_GPU_PRODUCT].endswith("-MIG-INVALID")


def test_gfd_strategy_none_has_no_mig_groups() -> None:
    out = labels(mig_node((SEVEN_SMALL,)), LabelingSettings(gfd_mig_strategy="none"))
    assert L.GFD_MIG_STRATEGY not in out.labels
    assert not any(k.startswith("nvidia.com/mig-") for k in out.labels)
    assert out.labels[L.GFD_MIG_CAPABLE] == "true"


def test_gfd_versions_and_compute_capability() -> None:
    out = labels(nvswitch_node())
    assert out.labels[L.GFD_DRIVER_MAJOR] == "535"
    assert out.labels[L.GFD_DRIVER_MINOR] == "104"
    assert out.labels[L.GFD_DRIVER_REV] == "05"
    assert out.labels[L.GFD_RUNTIME_MAJOR] == "12"
    assert out.labels[L.GFD_RUNTIME_MINOR] == "2"
    assert out.labels[L.GFD_COMPUTE_MAJOR] == "8"
    assert out.labels[L.GFD_COMPUTE_MINOR] == "0"
    assert out.labels[L.GFD_GPU_COUNT] == "8"
    assert out.labels[L.GFD_GPU_MEMORY] == "40960"


def test_neuronetes_set() -> None:
    out = labels(nvswitch_node())
    assert out.labels[L.NEURONETES_GPU_TYPE] == "A100"
    assert out.labels[L.NEURONETES_GPU_MEMORY] == "40Gi"
    assert out.labels[L.NEURONETES_GPU_COUNT] == "8"
    assert out.labels[L.NEURONETES_GPU_TOPOLOGY] == "nvlink"  # NVSwitch joins all pairs by NVLink
    assert out.labels[L.NEURONETES_MIG_CAPABLE] == "true"
    assert labels(pcie_node()).labels[L.NEURONETES_GPU_TOPOLOGY] == "pcie"


@pytest.mark.parametrize(
    ("product", "short"),
    [
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("NVIDIA RTX A6000", "A6000"),
        ("NVIDIA GH200 480GB", "GH200"),
    ],
)
def test_neuronetes_gpu_type(product: str, short: str) -> None:
    assert gpu_type(product) == short


def test_kubenexus_cpu_lists_go_to_annotations_only_when_not_legal() -> None:
    split = labels(nvswitch_node())  # NUMA CPUs 0-15,32-47 and 16-31,48-63
    assert split.labels[L.KUBENEXUS_NODE_COUNT] == "2"
    assert split.annotations["numa.kubenexus.io/node-0-cpus"] == "0-15,32-47"
    assert split.annotations["numa.kubenexus.io/node-1-cpus"] == "16-31,48-63"
    assert "numa.kubenexus.io/node-0-cpus" not in split.labels
    assert split.labels["numa.kubenexus.io/node-0-memory"] == "64Gi"
    contiguous = labels(pcie_node())
    assert contiguous.labels["numa.kubenexus.io/node-1-cpus"] == "32-63"
    assert "numa.kubenexus.io/node-1-cpus" not in contiguous.annotations


def test_compat_sets_are_switchable() -> None:
    only_gfd = labels(nvswitch_node(), LabelingSettings.from_compat("gfd"))
    prefixes = {k.split("/")[0] for k in [*only_gfd.labels, *only_gfd.annotations]}
    assert prefixes == {"topos.io", "nvidia.com"}
    none = labels(nvswitch_node(), LabelingSettings.from_compat("none"))
    assert {k.split("/")[0] for k in [*none.labels, *none.annotations]} == {"topos.io"}


def test_unknown_compat_set_or_strategy_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown label set"):
        LabelingSettings.from_compat("gfd,volcano")
    with pytest.raises(ValueError, match="unknown MIG strategy"):
        LabelingSettings.from_compat("gfd", gfd_mig_strategy="double")


def test_health_count_and_reason() -> None:
    topo = nvswitch_node(4)
    sick = msgspec.structs.replace(topo.gpus[2], healthy=False, health_reason="XID 79")
    topo = msgspec.structs.replace(topo, gpus=(*topo.gpus[:2], sick, topo.gpus[3]))
    out = labels(topo)
    assert out.labels[L.GPU_HEALTHY] == "3"
    assert out.annotations[L.GPU_HEALTH] == "GPU2 GPU-00000002-aaaa: XID 79"
    assert "3/4 healthy" in out.annotations[L.SUMMARY]
    assert L.GPU_HEALTH not in labels(nvswitch_node(4)).annotations


def test_topology_annotation_round_trips_without_volatile_fields() -> None:
    topo = nvswitch_node()
    out = labels(topo)
    decoded = topology_from_json(out.annotations[L.TOPOLOGY])
    assert isinstance(decoded, NodeTopology)
    assert decoded.links == topo.links
    assert [g.uuid for g in decoded.gpus] == [g.uuid for g in topo.gpus]
    assert all(g.memory_free_mib is None for g in decoded.gpus)
    # free memory drifting does not change anything the agent publishes
    drifted = msgspec.structs.replace(
        topo, gpus=tuple(msgspec.structs.replace(g, memory_free_mib=123) for g in topo.gpus)
    )
    assert labels(drifted) == out


def test_human_readable_annotations() -> None:
    out = labels(nvswitch_node())
    assert out.annotations[L.SUMMARY] == (
        "8x NVIDIA A100-SXM4-40GB (40960 MiB), nvswitch, 2 NUMA nodes, driver 535.104.05, "
        "CUDA 12.2, 8/8 healthy"
    )
    lines = out.annotations[L.GPUS].splitlines()
    assert len(lines) == 8
    assert lines[0] == "GPU0 NVIDIA A100-SXM4-40GB 40960MiB cc8.0 NUMA0 00000000:07:00.0 healthy"


def _fabric_node(*cliques: tuple[str, int] | None) -> NodeTopology:
    from common.model import Gpu, GpuFabric, GpuHealth

    gpus = tuple(
        Gpu(
            index=i,
            uuid=f"GPU-{i}",
            health=GpuHealth(
                fabric=None
                if c is None
                else GpuFabric(state="completed", cluster_uuid=c[0], clique_id=c[1])
            ),
        )
        for i, c in enumerate(cliques)
    )
    n = len(gpus)
    links = tuple(tuple("X" if i == j else "NV18" for j in range(n)) for i in range(n))
    return NodeTopology(hostname="tray", gpus=gpus, links=links)


def test_gpu_clique_in_gfds_format_only_when_the_gpus_agree() -> None:
    uuid = "5e1ab1f2-1d8a-4c1e-9b3e-2f7d0c8a9b10"
    tray = labels(_fabric_node((uuid, 7), (uuid, 7), (uuid, 7), (uuid, 7)))
    assert tray.labels[L.GFD_GPU_CLIQUE] == f"{uuid}.7"
    split = labels(_fabric_node((uuid, 7), (uuid, 8)))
    assert L.GFD_GPU_CLIQUE not in split.labels  # half-registered tray: no label
    assert L.GFD_GPU_CLIQUE not in labels(_fabric_node(None, None)).labels  # no fabric (HGX)
