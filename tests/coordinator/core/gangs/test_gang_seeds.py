"""The seed guides' gang examples work as written (only ``schedulerName`` changed): KubeNexus'
Spark job (1 driver + 10 executors, min 11) and 8-worker PyTorch job, decided whole by the
scheduling core through :func:`coordinator.core.gangs.cycle.schedule_gang`.

The YAML is read from ``../shared/seeds`` at test time (skipped when that folder is absent).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from common.model import Gpu, NodeTopology, NumaNode
from coordinator.core.gangs.cycle import GangDecision, schedule_gang
from coordinator.core.gangs.identity import GangKey, GangSpec, gang_of
from coordinator.core.gangs.manager import Allow, GangManager
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status

SEEDS = Path(__file__).resolve().parents[4] / ".." / "shared" / "seeds"
KUBENEXUS = next(iter(sorted(SEEDS.glob("002_*.txt"))), None) if SEEDS.is_dir() else None
pytestmark = pytest.mark.skipif(KUBENEXUS is None, reason="../shared/seeds is not available")


def seed_documents() -> list[dict[str, Any]]:
    assert KUBENEXUS is not None
    text = KUBENEXUS.read_text(encoding="utf-8")
    docs: list[dict[str, Any]] = []
    for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.S):
        try:
            docs.extend(d for d in yaml.safe_load_all(block) if isinstance(d, dict))
        except yaml.YAMLError:
            continue
    return docs


def pods_of(doc: dict[str, Any], count: int, namespace: str = "jobs") -> list[dict[str, Any]]:
    """The pods a Pod / Job / Deployment document makes, with only schedulerName changed."""
    if doc["kind"] == "Pod":
        template = {"metadata": doc["metadata"], "spec": doc["spec"]}
        base = doc["metadata"]["name"]
    else:
        template = doc["spec"]["template"]
        base = doc["metadata"]["name"]
    out = []
    for i in range(count):
        pod = copy.deepcopy(template)
        pod.setdefault("metadata", {})
        pod["metadata"]["name"] = base if count == 1 else f"{base}-{i}"
        pod["metadata"]["namespace"] = namespace
        pod["spec"]["schedulerName"] = "topos"
        out.append(pod)
    return out


def find(kind: str, name: str) -> dict[str, Any]:
    for doc in seed_documents():
        if doc.get("kind") == kind and doc.get("metadata", {}).get("name") == name:
            return doc
    raise AssertionError(f"{kind} {name} not in the seed")


def cpu_nodes(n: int) -> Snapshot:
    return Snapshot(
        NodeInfo.build(
            f"cpu-{i}",
            labels={"topos.io/leaf": "leaf-1"},
            allocatable={"cpu": 16_000, "memory": 64 * 2**30, "pods": 110},
        )
        for i in range(n)
    )


def gpu_nodes(n: int) -> Snapshot:
    """8-GPU nodes whose agent reported the GPUs and their links but no NUMA layout."""
    return Snapshot(
        NodeInfo.build(
            f"gpu-{i}",
            labels={"topos.io/leaf": f"leaf-{i // 2 + 1}"},
            allocatable={"nvidia.com/gpu": 8, "cpu": 96_000, "memory": 1024 * 2**30, "pods": 110},
            topology=msgspec.structs.replace(two_socket_topology(f"gpu-{i}"), numa_nodes=()),
        )
        for i in range(n)
    )


def requests(pods: list[dict[str, Any]]) -> list[PodRequest]:
    out = []
    for p in pods:
        parsed = parse_pod(p)
        assert isinstance(parsed, PodRequest), parsed
        out.append(parsed)
    return out


def spark_pods() -> list[dict[str, Any]]:
    driver = pods_of(find("Pod", "spark-driver"), 1)
    executors = pods_of(find("Deployment", "spark-executor"), 10)
    return driver + executors


def test_spark_driver_and_executors_form_one_gang_of_eleven() -> None:
    specs = {gang_of(p) for p in spark_pods()}
    assert specs == {
        GangSpec(key=GangKey("jobs", "spark-job-123"), min_member=11, source="kubenexus")
    }


def test_spark_job_is_placed_whole_when_it_fits_and_waits_whole_when_not() -> None:
    pods = requests(spark_pods())
    framework = build_framework()
    decided = schedule_gang(pods, cpu_nodes(3), framework, min_member=11)
    assert isinstance(decided, GangDecision)
    assert len(decided.decisions) == 11
    load: dict[str, int] = {}
    for d, pod in zip(decided.decisions, sorted(pods, key=lambda p: p.key), strict=True):
        load[d.node] = load.get(d.node, 0) + pod.requests["cpu"]
    assert max(load.values()) <= 16_000

    # 2 nodes hold 32 cores; the job needs 42: nothing is placed and the gang says why
    refused = schedule_gang(pods, cpu_nodes(2), framework, min_member=11)
    assert isinstance(refused, Status)
    clock = iter(range(1000))
    manager = GangManager(clock=lambda: float(next(clock)))
    for p in spark_pods():
        spec = gang_of(p)
        assert isinstance(spec, GangSpec)
        manager.observe(f"jobs/{p['metadata']['name']}", spec)
    key = GangKey("jobs", "spark-job-123")
    manager.reject(key, refused.message)
    assert manager.message(key).startswith(
        "waiting for pod group spark-job-123: 0/11 members placed; 0/2 nodes are available"
    )
    assert manager.reservations() == []


def test_pytorch_training_job_of_eight_workers() -> None:
    job = find("Job", "distributed-training")
    pods = pods_of(job, job["spec"]["parallelism"])
    spec = gang_of(pods[0])
    assert isinstance(spec, GangSpec)
    assert spec.min_member == 8
    decided = schedule_gang(requests(pods), gpu_nodes(4), build_framework(), min_member=8)
    assert isinstance(decided, GangDecision)
    # eight 1-GPU workers fit one 8-GPU node: the narrowest domain there is
    assert decided.plan.placement.tier == "node"
    assert len({d.node for d in decided.decisions}) == 1
    manager = GangManager(clock=lambda: 0.0)
    for p in pods:
        manager.observe(f"jobs/{p['metadata']['name']}", spec)
    verdict = manager.reserve(spec.key, decided.reservations())
    assert isinstance(verdict, Allow)
    assert len(verdict.pods) == 8


def two_socket_topology(host: str) -> NodeTopology:
    """8 GPUs, 4 per socket; NVLink inside a socket, SYS across."""
    gpus = tuple(
        Gpu(index=i, uuid=f"GPU-{host}-{i}", numa_node=i // 4, memory_total_mib=81920)
        for i in range(8)
    )
    links = tuple(
        tuple("X" if i == j else ("NV4" if i // 4 == j // 4 else "SYS") for j in range(8))
        for i in range(8)
    )
    numa = (
        NumaNode(id=0, cpus=tuple(range(48)), memory_mib=512 * 1024),
        NumaNode(id=1, cpus=tuple(range(48, 96)), memory_mib=512 * 1024),
    )
    return NodeTopology(hostname=host, gpus=gpus, links=links, numa_nodes=numa, cpu_count=96)


def test_multi_gpu_training_scenario_with_single_numa_workers() -> None:
    job = find("Job", "multi-gpu-training")
    pods = requests(pods_of(job, job["spec"]["parallelism"]))
    assert all(p.numa_policy == "single-numa" for p in pods)
    framework = build_framework()

    # Nodes that publish no NUMA topology cannot honour single-numa: the core says so per node,
    # and the gang waits whole with that reason.
    refused = schedule_gang(pods, gpu_nodes(2), framework, min_member=4)
    assert isinstance(refused, Status)
    assert "no NUMA topology" in refused.message

    snapshot = Snapshot(
        NodeInfo.build(
            f"dgx-{i}",
            labels={"topos.io/leaf": "leaf-1"},
            allocatable={"nvidia.com/gpu": 8, "cpu": 96_000, "memory": 1024 * 2**30, "pods": 110},
            topology=two_socket_topology(f"dgx-{i}"),
        )
        for i in range(2)
    )
    decided = schedule_gang(pods, snapshot, framework, min_member=4)
    assert isinstance(decided, GangDecision)
    assert len(decided.decisions) == 4
    assert decided.rounds == 1
    held = [gpu for d in decided.decisions for gpu in d.device_ids]
    assert len(held) == len(set(held)) == 8  # no GPU given twice inside the gang
    for d in decided.decisions:
        assert len(d.placement.numa) == 1  # each worker's GPUs, CPUs and memory on one socket
