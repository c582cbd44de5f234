"""Cluster descriptions: node names, automatic and explicit leaf/spine layout, the labels and
allocatable resources the scheduler sees, and clear errors for bad descriptions."""

from __future__ import annotations

import pytest

from agent.app import AgentSettings
from agent.devices import discover_profile
from common import labels as L
from common.labeling import labels
from coordinator.sim import ClusterError, describe, parse_cluster
from tests.support.sim_cluster import make_cluster

CLUSTER = """
name: lab
layout: {nodesPerLeaf: 2, leavesPerSpine: 2}
nodes:
  - profile: dgx-h100
    count: 3
  - profile: pcie-8x
    count: 2
  - profile: a100-mig
    count: 1
    namePrefix: mig
    leaf: edge
    spine: spine-9
    labels: {pool: inference}
"""


def test_layout_names_and_labels() -> None:
    spec, nodes = make_cluster(CLUSTER)
    by_name = {n.name: n for n in nodes}
    assert list(by_name) == [
        "dgx-h100-001",
        "dgx-h100-002",
        "dgx-h100-003",
        "pcie-8x-001",
        "pcie-8x-002",
        "mig-001",
    ]
    leaves = {
        n.name: (n.labels.get("topos.io/leaf"), n.labels.get("topos.io/spine")) for n in nodes
    }
    assert leaves == {
        "dgx-h100-001": ("leaf-1", "spine-1"),
        "dgx-h100-002": ("leaf-1", "spine-1"),
        "dgx-h100-003": ("leaf-2", "spine-1"),
        "pcie-8x-001": ("leaf-2", "spine-1"),
        "pcie-8x-002": ("leaf-3", "spine-2"),
        "mig-001": ("edge", "spine-9"),
    }
    h100 = by_name["dgx-h100-001"]
    assert h100.labels["topos.io/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert h100.allocatable["nvidia.com/gpu"] == 8
    assert h100.allocatable["cpu"] == 96_000
    assert h100.topology is not None
    assert h100.topology.hostname == "dgx-h100-001"
    mig = by_name["mig-001"]
    assert mig.labels["pool"] == "inference"
    assert "nvidia.com/gpu" not in mig.allocatable
    assert mig.allocatable["nvidia.com/mig-1g.5gb"] == 1
    assert describe(nodes) == {
        "nodes": 6,
        "gpus": 40,
        "mig_instances": 3,
        "leaves": 4,
        "spines": 3,
    }
    assert spec.name == "lab"


def test_nodes_carry_exactly_what_their_agent_publishes() -> None:
    spec, nodes = make_cluster(CLUSTER)
    profiles = {n.name: n.profile for n in spec.node_specs()}
    defaults = AgentSettings(node_name="any").labeling
    for node in nodes:
        hardware = discover_profile(profiles[node.name], hostname=node.name)
        published = labels(hardware, defaults).labels
        extra = {k: v for k, v in node.labels.items() if k not in published}
        assert {k: node.labels[k] for k in published} == published, node.name
        # beyond the agent's labels: only the kubelet's hostname, the leaf/spine and the
        # description's own labels
        assert set(extra) <= {"kubernetes.io/hostname", L.LEAF, L.SPINE, "pool"}, node.name
    h100 = nodes[0]
    # selectors written for GPU Feature Discovery or KubeNexus match simulated nodes too
    assert h100.labels[L.GFD_GPU_PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    assert h100.labels[L.KUBENEXUS_NODE_COUNT] == "2"
    mig = next(n for n in nodes if n.name == "mig-001")
    assert mig.labels[L.gfd_mig_key("3g.20gb", "count")] == "1"


def test_cost_model_overrides() -> None:
    spec = parse_cluster(
        "nodes: [{profile: dgx-h100}]\ncostModel: {link: {SYS: 2}, network: {leaf: 1.05}}"
    )
    assert spec.cost_model.link["SYS"] == 2.0
    assert spec.cost_model.link["PIX"] == 1.10  # untouched defaults stay
    assert spec.cost_model.stretch("SYS", "leaf") == pytest.approx(2.1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes: [{profile: dgx-h100, count: 0}]", "nodes[0].count must be a whole number ≥ 1"),
        ("nodes: [{profile: dgx-h100, count: two}]", "count must be a whole number"),
        ("nodes: []", "nodes must be a non-empty list"),
        ("nodez: []", "unknown key 'nodez'"),
        ("nodes: [{count: 2}]", "nodes[0].profile must be a non-empty string"),
        ("nodes: [{profile: x, colour: red}]", "nodes[0]: unknown key 'colour'"),
        ("nodes: [{profile: x, leaf: 'a b'}]", "nodes[0].leaf 'a b' is not a valid label value"),
        ("nodes: [{profile: x, namePrefix: 'Big_Node'}]", "namePrefix 'Big_Node' must be"),
        ("nodes: [{profile: x}]\nlayout: {perLeaf: 2}", "unknown key layout.perLeaf"),
        ("nodes: [{profile: x}]\ncostModel: {link: {NV9: 2}}", "unknown class 'NV9'"),
        ("nodes: [{profile: x}]\ncostModel: {network: {leaf: 0.5}}", "between 1 and 100"),
        ("- just\n- a list", "expected a mapping"),
        ("nodes: [unclosed", "not valid YAML"),
    ],
)
def test_bad_descriptions_name_the_field(text: str, message: str) -> None:
    with pytest.raises(ClusterError) as err:
        parse_cluster(text, name="c.yaml")
    assert message in str(err.value)
    assert str(err.value).startswith("c.yaml") or "layout" in message
