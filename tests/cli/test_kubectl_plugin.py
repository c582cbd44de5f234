"""``kubectl topos``: what a user sees.

* Against the real coordinator application (in-memory inventory on 127.0.0.1, fed one GPU node
  with a pod holding a GPU): ``nodes`` shows free GPUs per node and per NUMA node, and MIG free.
* Through the real API server's service proxy (the default path): the real ``kubectl`` finds the
  ``kubectl-topos`` executable; a missing coordinator, a coordinator Service without endpoints
  and a user without the topos-viewer Role each give one clear line and exit status 1.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from cli.kubectl_plugin import build_parser, context_namespace, parse_pod_ref, run
from common.kube import KubeClient, Resource
from common.model import Gpu, MigInstance, NodeTopology, NumaNode
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.app.config.sections import Config
from coordinator.app.main import running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.inventory.state import BoundPod, KubeNode
from coordinator.inventory.store import Inventory
from devcluster.binaries import Binaries
from devcluster.controlplane import ControlPlane
from tests.support.ci import skip_or_fail
from tests.support.kubectl_plugin import PLUGIN, kubectl_topos

SERVICES = Resource("", "v1", "services", namespaced=True, kind="Service")
ENDPOINTS = Resource("", "v1", "endpoints", namespaced=True, kind="Endpoints")


def _topology() -> NodeTopology:
    gpus = [
        Gpu(index=i, uuid=f"GPU-{i}", product="NVIDIA H100 80GB HBM3", numa_node=i // 2)
        for i in range(4)
    ]
    mig = Gpu(
        index=4,
        uuid="GPU-4",
        product="NVIDIA A100-SXM4-40GB",
        numa_node=1,
        mig_enabled=True,
        mig_instances=(
            MigInstance(
                profile="3g.20gb",
                gi_id=1,
                placement_start=0,
                placement_size=4,
                memory_mib=20096,
                slices=3,
                uuid="MIG-a",
            ),
        ),
    )
    links = tuple(tuple("X" if i == j else "NV12" for j in range(5)) for i in range(5))
    return NodeTopology(
        hostname="gpu-1",
        gpus=(*gpus, mig),
        links=links,
        numa_nodes=(NumaNode(id=0, cpus=(0, 1)), NumaNode(id=1, cpus=(2, 3))),
    )


async def _plugin(*argv: str) -> str:
    return await run(build_parser().parse_args(list(argv)))


async def test_nodes_against_the_real_coordinator_app() -> None:
    inventory = Inventory()
    inventory.upsert_node(
        KubeNode(
            name="gpu-1",
            labels={
                "topos.io/leaf": "leaf-a",
                "nvidia.com/gpu.clique": "3c5b0f2e-8a4d-4e6b-9f1a-2d7c6e5b4a39.7",
            },
            allocatable={"nvidia.com/gpu": 4, "nvidia.com/mig-3g.20gb": 1, "pods": 110},
        )
    )
    inventory.apply_hello(
        "gpu-1", agent_id="a1", agent_version="0.1.0", seq=1, topology=_topology(), allocations=()
    )
    inventory.upsert_pod(
        BoundPod(
            uid="u1",
            namespace="ml",
            name="train-0",
            node="gpu-1",
            scheduler="topos",
            requests={"nvidia.com/gpu": 1},
            assigned_gpus=("GPU-1",),
        )
    )
    app = wire(Config(), MemoryBackend(MemoryCluster(inventory)))
    async with running(app) as url:
        out = await _plugin("--coordinator", url, "nodes")
        as_json = await _plugin("--coordinator", url, "-o", "json", "nodes")
    header, row = out.splitlines()
    columns = re.split(r"\s{3,}", header)
    assert columns == [
        "NODE",
        "STATUS",
        "GPU",
        "GPUS FREE",
        "NUMA FREE",
        "MIG FREE",
        "LEAF",
        "NVLINK CLIQUE",
    ]
    cells = dict(zip(columns, re.split(r"\s{3,}", row), strict=True))
    assert cells["NODE"] == "gpu-1"
    assert cells["STATUS"] == "Ready"
    assert cells["GPU"] == "NVIDIA A100-SXM4-40GB, NVIDIA H100 80GB HBM3"
    # one of the four whole GPUs is held (the MIG-partitioned one is counted in slices)
    assert cells["GPUS FREE"] == "3/4"
    assert cells["NUMA FREE"] == "0:1/2 1:2/2"  # the held GPU-1 sits on NUMA node 0
    assert cells["MIG FREE"] == "3g.20gb=1"
    assert cells["LEAF"] == "leaf-a"
    assert cells["NVLINK CLIQUE"] == "3c5b0f2e.7"  # the rack: cluster UUID's start, clique id
    assert '"name": "gpu-1"' in as_json


async def test_a_node_described_by_its_annotation_is_ready_not_agentless() -> None:
    """No agent stream, but the Node carries the topology its agent published: Topos schedules
    on it, and the STATUS says where the topology came from instead of "NoAgent"."""
    inventory = Inventory()
    inventory.upsert_node(
        KubeNode(name="seeded", allocatable={"nvidia.com/gpu": 4}, topology=_topology())
    )
    inventory.upsert_node(KubeNode(name="bare", allocatable={"nvidia.com/gpu": 4}))
    app = wire(Config(), MemoryBackend(MemoryCluster(inventory)))
    async with running(app) as url:
        out = await _plugin("--coordinator", url, "nodes")
    header, *rows = out.splitlines()
    columns = re.split(r"\s{3,}", header)
    status = {
        cells["NODE"]: cells["STATUS"]
        for cells in (dict(zip(columns, re.split(r"\s{3,}", r), strict=True)) for r in rows)
    }
    assert status == {"seeded": "Ready (annotation)", "bare": "NoAgent"}


async def test_gpus_lists_each_gpus_holders_and_shares() -> None:
    inventory = Inventory()
    inventory.upsert_node(KubeNode(name="gpu-1", allocatable={"nvidia.com/gpu": 4, "pods": 110}))
    inventory.apply_hello(
        "gpu-1", agent_id="a1", agent_version="0.1.0", seq=1, topology=_topology(), allocations=()
    )
    for name, share in (("a", "fraction=0.5,memory=40Gi"), ("b", "fraction=0.25")):
        inventory.upsert_pod(
            BoundPod(
                uid=f"u-{name}",
                namespace="ml",
                name=name,
                node="gpu-1",
                scheduler="topos",
                assigned_gpus=("GPU-2",),
                annotations={"topos.io/gpu-share": share},
            )
        )
    app = wire(Config(), MemoryBackend(MemoryCluster(inventory)))
    async with running(app) as url:
        out = await _plugin("--coordinator", url, "gpus", "gpu-1")
        nodes = await _plugin("--coordinator", url, "nodes")
    header, *rows = out.splitlines()
    assert re.split(r"\s{3,}", header) == ["NODE", "GPU", "PRODUCT", "USE", "HOLDERS"]
    cells = {r[1]: r for r in (re.split(r"\s{3,}", row) for row in rows)}
    assert cells["2"][3:] == ["shared, 0.25 free", "ml/a 0.5 40Gi, ml/b 0.25"]
    assert cells["0"][3:] == ["free", "-"]
    assert cells["4"][3] == "MIG"
    # the shared GPU is not free for a whole-GPU pod, though its holders ask no nvidia.com/gpu
    assert "3/4" in nodes.splitlines()[1]


def test_pod_references_and_the_contexts_namespace(tmp_path: Path) -> None:
    assert parse_pod_ref("pod/train-0") == "train-0"
    assert parse_pod_ref("train-0") == "train-0"
    for bad in ("deploy/x", "pod/", "pod/a/b"):
        with pytest.raises(Exception, match="explain takes pod/NAME"):
            parse_pod_ref(bad)
    config = tmp_path / "kubeconfig"
    config.write_text(
        "current-context: dev\ncontexts:\n"
        "- name: dev\n  context: {cluster: c, user: u, namespace: ml}\n"
        "- name: prod\n  context: {cluster: c, user: u}\n"
    )
    assert context_namespace(str(config), None) == "ml"
    assert context_namespace(str(config), "prod") == "default"
    assert context_namespace(str(tmp_path / "missing"), None) == "default"


async def test_through_the_api_servers_proxy(
    k8s_binaries: Binaries,
    kubeconfig: Path,
    kube: KubeClient,
    namespace: str,
    control_plane: ControlPlane,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    if not PLUGIN.exists():
        skip_or_fail("kubectl-topos is not installed in this venv (pip install -e '.[dev]')")
    # no Service at all
    code, out, err = await kubectl_topos(
        k8s_binaries, kubeconfig, "--topos-namespace", namespace, "nodes"
    )
    assert code == 1
    assert out == ""
    assert err.strip().startswith("kubectl-topos: no coordinator: service")
    assert len(err.strip().splitlines()) == 1
    # whatif POSTs through the same proxy, and is told the same
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n")
    code, out, err = await kubectl_topos(
        k8s_binaries, kubeconfig, "--topos-namespace", namespace, "whatif", "-f", str(manifest)
    )
    assert code == 1
    assert out == ""
    assert err.strip().startswith("kubectl-topos: no coordinator: service")

    # a Service whose pods are not running: the proxy has nowhere to go
    await kube.create(
        SERVICES,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "topos-coordinator"},
            "spec": {
                "selector": {"app.kubernetes.io/name": "topos-coordinator"},
                "ports": [{"name": "https", "port": 443, "targetPort": 8443}],
            },
        },
        namespace=namespace,
    )
    await kube.create(  # what the endpoints controller writes while no pod is ready
        ENDPOINTS,
        {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "topos-coordinator"}},
        namespace=namespace,
    )
    code, _, err = await kubectl_topos(
        k8s_binaries, kubeconfig, "--topos-namespace", namespace, "gangs"
    )
    assert code == 1
    assert "is not answering" in err

    # a user without the topos-viewer Role
    bob = control_plane.write_user_kubeconfig(tmp_path / "bob", user=unique_name("bob"))
    code, _, err = await kubectl_topos(k8s_binaries, bob, "--topos-namespace", namespace, "nodes")
    assert code == 1
    assert "not allowed to reach the coordinator" in err
    assert "topos-viewer" in err
