"""``topos devcluster up --nodes PROFILE:N,…`` (devcluster.nodes): the spec grammar, node names
and leaf/spine placement, capacity from the profile (MIG resources included), Ready Node objects
on the real API server, and the background agents publishing labels until stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from common.kube import NODES, KubeClient
from common.quantity import parse_quantity
from devcluster import nodes as simnodes
from devcluster.subprocess_env import NO_BYTECODE


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("dgx-a100", "PROFILE:N"),
        ("dgx-a100:x", "not a number"),
        ("dgx-a100:0", "at least 1"),
        ("dgx-a100:-2", "at least 1"),
        (":3", "PROFILE:N"),
        ("dgx-a100:2,,pcie-8x:1", "PROFILE:N"),
        ("dgx-a100:9999", "at most"),
    ],
)
def test_bad_specs_are_refused_with_the_entry_named(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        simnodes.parse_spec(spec)


def test_unknown_profile_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no-such-box"):
        simnodes.plan_nodes(simnodes.parse_spec("no-such-box:2"))


def test_nodes_fill_leaves_of_four_and_spines_of_four_leaves_in_order() -> None:
    planned = simnodes.plan_nodes(simnodes.parse_spec("pcie-8x:17,ws-4x-nvlink:2"))
    names = [n.name for n in planned]
    assert names[:2] == ["pcie-8x-0", "pcie-8x-1"]
    assert names[-2:] == ["ws-4x-nvlink-0", "ws-4x-nvlink-1"]
    assert [n.leaf for n in planned[:5]] == ["leaf-0"] * 4 + ["leaf-1"]
    assert planned[15].spine == "spine-0"
    assert planned[16].spine == "spine-1"
    assert planned[16].leaf == "leaf-4"
    assert planned[18].leaf == "leaf-4"


def test_capacity_matches_the_profile_including_mig_instances() -> None:
    (dgx,) = simnodes.plan_nodes([("dgx-a100", 1)])
    cap = simnodes.capacity(dgx.topology)
    assert cap["nvidia.com/gpu"] == "8"
    assert cap["cpu"] == str(dgx.topology.cpu_count)
    assert cap["memory"] == f"{dgx.topology.memory_mib}Mi"
    assert cap["pods"] == "110"
    (mig,) = simnodes.plan_nodes([("a100-mig", 1)])
    mig_cap = simnodes.capacity(mig.topology)
    expected = len(mig.topology.gpus[0].mig_instances)
    assert sum(int(v) for k, v in mig_cap.items() if k.startswith("nvidia.com/mig-")) == expected
    assert "nvidia.com/gpu" not in mig_cap  # its only GPU is in MIG mode: handed out as slices


def test_imported_profile_files_work_as_profile(tmp_path: Path) -> None:
    from agent.devices.profile import load_profile, profile_to_yaml

    path = tmp_path / "My_Box.yaml"
    path.write_text(profile_to_yaml(load_profile("ws-4x-nvlink")))
    (node,) = simnodes.plan_nodes(simnodes.parse_spec(f"{path}:1"))
    assert node.name == "my-box-0"
    assert simnodes.capacity(node.topology)["nvidia.com/gpu"] == "4"


async def test_registered_nodes_are_ready_with_profile_capacity(
    kube: KubeClient, unique_name: Callable[[str], str]
) -> None:
    planned = simnodes.plan_nodes([("a100-mig", 1)])
    node = simnodes.SimNode(
        name=unique_name("mig"),
        profile="a100-mig",
        leaf="leaf-7",
        spine="spine-1",
        topology=planned[0].topology,
    )
    await simnodes.register(kube, [node])
    await simnodes.register(kube, [node])  # re-registering refreshes, doesn't fail
    obj = await kube.get(NODES, node.name)
    assert obj["metadata"]["labels"]["topos.io/leaf"] == "leaf-7"
    ready = [c for c in obj["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"
    # Ready and schedulable: the admission-added not-ready taint is lifted, as a controller would.
    assert not [
        t for t in obj["spec"].get("taints", []) if t["key"] == "node.kubernetes.io/not-ready"
    ]

    def parsed(resources: dict[str, str]) -> dict[str, object]:
        return {k: parse_quantity(v) for k, v in resources.items()}

    assert parsed(obj["status"]["allocatable"]) == parsed(simnodes.capacity(node.topology))


async def test_start_nodes_runs_agents_that_publish_until_stopped(
    kube: KubeClient, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in NO_BYTECODE.items():  # for the agents' process start_nodes starts
        monkeypatch.setenv(key, value)
    # Profile names no other test uses, so the node names are ours (registered afresh).
    summary = await asyncio.to_thread(
        simnodes.start_nodes,
        spec="gh200-4x:1,l40s-4x:1",
        kubeconfig=kubeconfig,
        directory=tmp_path,
    )
    try:
        assert "2 simulated nodes" in summary
        for name in ("gh200-4x-0", "l40s-4x-0"):
            labels = (await kube.get(NODES, name))["metadata"]["labels"]
            assert labels["topos.io/gpu.count"] == "4"
            assert labels["topos.io/leaf"] == "leaf-0"
        pid = int((tmp_path / "nodes.json").read_text().split('"pid": ')[1].split(",")[0])
    finally:
        await asyncio.to_thread(simnodes.stop_nodes, directory=tmp_path)
    assert not (tmp_path / "nodes.json").exists()
    assert not psutil.pid_exists(pid)
