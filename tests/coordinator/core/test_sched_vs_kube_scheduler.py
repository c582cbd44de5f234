"""Differential test against the real kube-scheduler of the harness's Kubernetes version.

The same Nodes and bound Pods are created on the test API server. A real ``kube-scheduler``, with
a profile of its own scheduler name (so it touches no other test's pods), schedules each incoming
pod. The pure core is run on a snapshot built from the same objects, and the two must agree:

- on the FailedScheduling summary (before kube's "no new claims…, preemption: …" suffixes),
  byte for byte;
- on the node, when only one node is feasible.

Node conditions are ignored on both sides: kube-scheduler acts on taints only. (The API server
adds ``node.kubernetes.io/not-ready:NoSchedule`` to a new Node; the test sets each node's taints
explicitly afterwards, as a node lifecycle controller would once the node is Ready.)
"""

from __future__ import annotations

import ssl
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.kube import NODES, PODS, KubeClient
from common.model import Gpu, NodeTopology
from common.podkeys import GPU_RESOURCE
from common.quantity import parse_quantity, to_int, to_milli
from coordinator.adapters.kube.owners import OWNER_KINDS
from coordinator.adapters.kube.volumes import (
    CSI_NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    VOLUME_ATTACHMENTS,
)
from coordinator.adapters.kube.workloads import REPLICATION_CONTROLLERS, SERVICES
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.snapshot.volumes import Volumes
from coordinator.core.snapshot.workloads import WorkloadSelectors
from devcluster.kube_wait import scheduled_message, wait_for_object
from devcluster.pods import host_port, pod
from devcluster.processes import free_port
from tests.support.ci import skip_or_fail
from tests.support.kube_objects import create_node
from tests.support.sched_hw import bound_info
from tests.support.volumes import EBS, attachment, claim, csi_node, local_pv, storage_class
from tests.support.volumes import pv as csi_pv

pytestmark = pytest.mark.kube


def _ready(proc: subprocess.Popen[bytes], port: int, *, timeout_s: float = 120.0) -> bool:
    """Poll kube-scheduler's /readyz (its informers have synced) while the process lives."""
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            url = f"https://127.0.0.1:{port}/readyz"
            with urllib.request.urlopen(url, context=insecure, timeout=5) as reply:
                if reply.status == 200:
                    return True
        except OSError:
            pass  # not listening yet, or not ready (HTTP 500)
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module")
def kube_scheduler(control_plane: Any, tmp_path_factory: Any) -> Iterator[str]:
    from devcluster.binaries import find

    found = find(extra=True)
    binary = found.kube_scheduler if found is not None else None
    if binary is None or not Path(binary).exists():
        # `make test` builds it (`make k8s-binaries`): under CI=true its absence is a failure
        skip_or_fail("kube-scheduler is not built (python -m devcluster.binaries ensure --all)")
    name = f"kube-diff-{uuid.uuid4().hex[:6]}"
    work = tmp_path_factory.mktemp("kube-scheduler")
    config = work / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(control_plane.kubeconfig)},
                "leaderElection": {"leaderElect": False},
                "profiles": [{"schedulerName": name}],
            }
        )
    )
    log = (work / "kube-scheduler.log").open("w")
    port = free_port()
    proc = subprocess.Popen(
        [
            str(binary),
            f"--config={config}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            f"--authentication-kubeconfig={control_plane.kubeconfig}",
            f"--authorization-kubeconfig={control_plane.kubeconfig}",
            # The GPUs compared here are a device plugin's. With this gate on (beta, default on
            # in 1.36), a DeviceClass naming `extendedResourceName: nvidia.com/gpu` that a DRA
            # test left on the shared plane makes kube-scheduler try a node without the
            # resource by claims ("cannot allocate all claims"), so the result would hang on
            # the order the tests ran in.
            "--feature-gates=DRAExtendedResource=false",
            "--v=1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    if not _ready(proc, port):
        proc.kill()
        proc.wait()
        log.close()
        tail = (work / "kube-scheduler.log").read_text()[-2000:]
        pytest.fail(f"kube-scheduler never became ready (exit {proc.returncode}): {tail}")
    try:
        yield name
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


# --- building the same cluster on both sides ---------------------------------------------------


def _amount(resource: str, raw: object) -> int:
    q = parse_quantity(raw)
    return to_milli(q) if resource == "cpu" else to_int(q)


def _pcie_gpus(name: str, count: int) -> NodeTopology | None:
    """What an agent would report for ``count`` PCIe GPUs: Topos binds a GPU pod only to a node
    with a topology (kube-scheduler, counting devices, needs none)."""
    if count <= 0:
        return None
    return NodeTopology(
        hostname=name,
        gpus=tuple(Gpu(index=i, uuid=f"GPU-{name}-{i}") for i in range(count)),
        links=tuple(tuple("X" if i == j else "PHB" for j in range(count)) for i in range(count)),
    )


def node_info(obj: Mapping[str, Any], pods: list[PodInfo]) -> NodeInfo:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    gpus = _amount(GPU_RESOURCE, (status.get("allocatable") or {}).get(GPU_RESOURCE, "0"))
    return NodeInfo.build(
        meta["name"],
        topology=_pcie_gpus(meta["name"], gpus),
        labels=meta.get("labels") or {},
        allocatable={k: _amount(k, v) for k, v in (status.get("allocatable") or {}).items()},
        taints=tuple(
            Taint(t["key"], t.get("value", ""), t["effect"]) for t in spec.get("taints") or ()
        ),
        unschedulable=bool(spec.get("unschedulable")),
        pods=pods,
    )


async def workload_selectors(kube: KubeClient) -> WorkloadSelectors:
    """The Services' and controllers' selectors, as the coordinator's watches keep them."""
    out = WorkloadSelectors()
    kinds = {"Service": SERVICES, "ReplicationController": REPLICATION_CONTROLLERS}
    kinds.update({k: OWNER_KINDS[k] for k in ("ReplicaSet", "StatefulSet")})
    for kind, resource in kinds.items():
        for obj in (await kube.list(resource))["items"]:
            out.put(kind, obj)
    return out


async def volume_objects(kube: KubeClient) -> Volumes:
    """Claims, PVs, StorageClasses, CSINodes and VolumeAttachments, as the coordinator's
    watches keep them."""
    out = Volumes()
    kinds = (
        ("PersistentVolumeClaim", PERSISTENT_VOLUME_CLAIMS),
        ("PersistentVolume", PERSISTENT_VOLUMES),
        ("StorageClass", STORAGE_CLASSES),
        ("CSINode", CSI_NODES),
        ("VolumeAttachment", VOLUME_ATTACHMENTS),
    )
    for kind, resource in kinds:
        for obj in (await kube.list(resource))["items"]:
            out.put(kind, obj)  # type: ignore[arg-type]
    return out


async def cluster_snapshot(kube: KubeClient) -> Snapshot:
    nodes = (await kube.list(NODES))["items"]
    pods = (await kube.list(PODS))["items"]
    by_node: dict[str, list[PodInfo]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        info = bound_info(p, node=node) if node else None
        if info is not None:
            by_node.setdefault(node, []).append(info)
    return Snapshot(
        [node_info(n, by_node.get(n["metadata"]["name"], [])) for n in nodes],
        workloads=await workload_selectors(kube),
        volumes=await volume_objects(kube),
    )


async def make_node(
    kube: KubeClient,
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    cpu: str = "32",
    memory: str = "128Gi",
    gpus: int = 0,
    pods: int = 110,
) -> None:
    await create_node(
        kube, name, labels=labels, spec={"unschedulable": True} if unschedulable else {}
    )
    # Replace the not-ready taint the API server added with the taints this node should have.
    await kube.patch(NODES, name, {"spec": {"taints": taints or None}})
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    await kube.patch(
        NODES,
        name,
        {"status": {"capacity": resources, "allocatable": resources}},
        subresource="status",
    )


# Pods are created in the test's namespace.
pod_obj = partial(pod, namespace=None)


async def kube_verdict(kube: KubeClient, namespace: str, name: str) -> tuple[str | None, str]:
    """(node, "") when kube-scheduler bound the pod, (None, message) when it gave up."""
    obj = await wait_for_object(
        kube,
        PODS,
        name,
        lambda pod: (
            bool((pod.get("spec") or {}).get("nodeName"))
            or bool(scheduled_message(pod, status="False"))
        ),
        namespace=namespace,
        what=f"kube-scheduler's verdict on {namespace}/{name}",
    )
    node = (obj.get("spec") or {}).get("nodeName")
    if node:
        return node, ""
    message = str(scheduled_message(obj, status="False"))
    # "<summary>. no new claims to deallocate, preemption: …" → "<summary>."
    return None, message.split(". ", 1)[0].rstrip(".") + "."


async def compare(
    kube: KubeClient, namespace: str, obj: dict[str, Any]
) -> tuple[str | None, str, Decision | Failure]:
    """Our verdict on the cluster as it is, then kube-scheduler's on the same pod."""
    ours_obj = dict(obj, metadata={**obj["metadata"], "namespace": namespace})
    ours = schedule_one(ours_obj, await cluster_snapshot(kube), build_framework())
    await kube.create(PODS, obj, namespace=namespace)
    node, message = await kube_verdict(kube, namespace, obj["metadata"]["name"])
    return node, message, ours


# --- scenarios -----------------------------------------------------------------------------------

ZONE = "topology.kubernetes.io/zone"


async def test_zone_anti_affinity_message_matches_kube_scheduler(
    kube: KubeClient, namespace: str, kube_scheduler: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    app = f"llm-{tag}"
    for z in ("a", "b", "c"):
        await make_node(kube, f"d{tag}-{z}", labels={ZONE: f"zone-{tag}-{z}", "diff": tag}, gpus=8)
    await make_node(
        kube,
        f"d{tag}-dedicated",
        labels={ZONE: f"zone-{tag}-a", "diff": tag},
        taints=[{"key": "gpu-only", "value": "true", "effect": "NoSchedule"}],
        gpus=8,
    )
    anti = {
        "nodeSelector": {"diff": tag},
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": ZONE,
                        "labelSelector": {
                            "matchExpressions": [{"key": "app", "operator": "In", "values": [app]}]
                        },
                    }
                ]
            }
        },
    }
    for i, z in enumerate("abc"):
        replica = pod_obj(
            f"r{i}", scheduler=kube_scheduler, node=f"d{tag}-{z}", labels={"app": app}, spec=anti
        )
        await kube.create(PODS, replica, namespace=namespace)
    fourth = pod_obj("r3", scheduler=kube_scheduler, labels={"app": app}, gpus=1, spec=anti)
    node, message, ours = await compare(kube, namespace, fourth)
    assert node is None
    assert isinstance(ours, Failure)
    assert ours.message == message


async def test_existing_anti_affinity_and_pod_affinity_messages_match(
    kube: KubeClient, namespace: str, kube_scheduler: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    for k in range(2):
        await make_node(kube, f"e{tag}-{k}", labels={"diff": tag})
    loner = pod_obj(
        "loner",
        scheduler=kube_scheduler,
        node=f"e{tag}-0",
        labels={"role": f"r{tag}"},
        spec={
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"role": f"r{tag}"}},
                        }
                    ]
                }
            }
        },
    )
    await kube.create(PODS, loner, namespace=namespace)
    # Symmetry: a pod without affinity may not join the loner; only e-1 is feasible.
    plain = pod_obj(
        "plain",
        scheduler=kube_scheduler,
        labels={"role": f"r{tag}"},
        spec={"nodeSelector": {"diff": tag}},
    )
    node, message, ours = await compare(kube, namespace, plain)
    assert isinstance(ours, Decision), getattr(ours, "message", "")
    assert node == ours.node == f"e{tag}-1"
    # Affinity to something that runs nowhere.
    wants_cache = pod_obj(
        "wants-cache",
        scheduler=kube_scheduler,
        spec={
            "nodeSelector": {"diff": tag},
            "affinity": {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app": f"cache-{tag}"}},
                        }
                    ]
                }
            },
        },
    )
    node, message, ours = await compare(kube, namespace, wants_cache)
    assert node is None
    assert isinstance(ours, Failure)
    assert ours.message == message


async def test_resources_taints_cordon_and_spread_messages_match(
    kube: KubeClient, namespace: str, kube_scheduler: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    await make_node(kube, f"f{tag}-small", labels={"diff": tag, ZONE: f"z{tag}-a"}, cpu="2", gpus=8)
    await make_node(kube, f"f{tag}-nogpu", labels={"diff": tag, ZONE: f"z{tag}-a"})
    await make_node(kube, f"f{tag}-full", labels={"diff": tag, ZONE: f"z{tag}-b"}, pods=1, gpus=8)
    await make_node(kube, f"f{tag}-cordoned", labels={"diff": tag}, unschedulable=True, gpus=8)
    await make_node(
        kube,
        f"f{tag}-tainted",
        labels={"diff": tag, ZONE: f"z{tag}-c"},
        taints=[{"key": "dedicated", "value": "infer", "effect": "NoExecute"}],
        gpus=8,
    )
    await kube.create(
        PODS, pod_obj("filler", scheduler=kube_scheduler, node=f"f{tag}-full"), namespace=namespace
    )
    big = pod_obj(
        "big", scheduler=kube_scheduler, cpu="4", gpus=2, spec={"nodeSelector": {"diff": tag}}
    )
    node, message, ours = await compare(kube, namespace, big)
    assert node is None
    assert isinstance(ours, Failure)
    assert ours.message == message

    # A node without the zone label, then a spread pod that cannot reach minDomains.
    await make_node(kube, f"f{tag}-nozone", labels={"diff": tag}, gpus=8)
    spread = pod_obj(
        "spread",
        scheduler=kube_scheduler,
        labels={"app": f"web-{tag}"},
        gpus=1,
        spec={
            "nodeSelector": {"diff": tag},
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": ZONE,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": f"web-{tag}"}},
                    "minDomains": 5,
                }
            ],
        },
    )
    await kube.create(
        PODS,
        pod_obj(
            "web-0", scheduler=kube_scheduler, node=f"f{tag}-small", labels={"app": f"web-{tag}"}
        ),
        namespace=namespace,
    )
    node, message, ours = await compare(kube, namespace, spread)
    if node is None:
        assert isinstance(ours, Failure)
        assert ours.message == message
    else:
        assert isinstance(ours, Decision)
        assert ours.node == node


async def test_node_affinity_operators_init_containers_and_tolerations_match(
    kube: KubeClient, namespace: str, kube_scheduler: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    await make_node(kube, f"g{tag}-8", labels={"diff": tag, "gpus": "8"}, cpu="8", gpus=8)
    await make_node(kube, f"g{tag}-4", labels={"diff": tag, "gpus": "4"}, cpu="16", gpus=4)
    await make_node(
        kube,
        f"g{tag}-spot",
        labels={"diff": tag, "gpus": "8", "tier": "spot"},
        taints=[{"key": "spot", "value": "yes", "effect": "NoSchedule"}],
        cpu="16",
        gpus=8,
    )
    affinity = {
        "nodeSelector": {"diff": tag},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["4"]}]}
                    ]
                }
            }
        },
        # The init container needs 12 CPUs: more than g-8 has, less than g-spot.
        "initContainers": [
            {
                "name": "warm",
                "image": "registry.invalid/x",
                "resources": {"requests": {"cpu": "12"}},
            }
        ],
    }
    first = pod_obj("gt", scheduler=kube_scheduler, gpus=1, spec=affinity)
    node, message, ours = await compare(kube, namespace, first)
    assert node is None
    assert isinstance(ours, Failure)
    assert ours.message == message
    tolerant = pod_obj(
        "gt-tolerant",
        scheduler=kube_scheduler,
        gpus=1,
        spec={**affinity, "tolerations": [{"key": "spot", "operator": "Exists"}]},
    )
    node, message, ours = await compare(kube, namespace, tolerant)
    assert isinstance(ours, Decision), getattr(ours, "message", "")
    assert node == ours.node == f"g{tag}-spot"


# --- randomized: many small clusters and pods ----------------------------------------------------


def _random_pod(rng: Any, name: str, scheduler: str, tag: str) -> dict[str, Any]:
    apps = [f"web-{tag}", f"db-{tag}", f"cache-{tag}"]
    spec: dict[str, Any] = {"nodeSelector": {"diff": tag}}
    labels = {"app": rng.choice(apps)} if rng.random() < 0.8 else {}
    if rng.random() < 0.3:
        spec["nodeSelector"]["tier"] = rng.choice(["spot", "ondemand"])
    if rng.random() < 0.3:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                rng.choice(
                                    [
                                        {"key": "gpus", "operator": "Gt", "values": ["4"]},
                                        {"key": "tier", "operator": "NotIn", "values": ["spot"]},
                                        {"key": ZONE, "operator": "Exists"},
                                        {"key": "tier", "operator": "DoesNotExist"},
                                    ]
                                )
                            ]
                        }
                    ]
                }
            }
        }
    term = {
        "topologyKey": rng.choice(["kubernetes.io/hostname", ZONE]),
        "labelSelector": {"matchLabels": {"app": rng.choice(apps)}},
    }
    roll = rng.random()
    if roll < 0.2:
        spec.setdefault("affinity", {})["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [term]
        }
    elif roll < 0.35:
        spec.setdefault("affinity", {})["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [term]
        }
    elif roll < 0.5 and labels:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": labels},
            }
        ]
    if rng.random() < 0.4:
        spec["tolerations"] = [
            rng.choice(
                [
                    {"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"},
                    {"key": "maint", "operator": "Exists"},
                    {"operator": "Exists"},
                    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
                ]
            )
        ]
    obj = pod_obj(
        name,
        scheduler=scheduler,
        labels=labels,
        cpu=rng.choice(["500m", "2", "6"]),
        gpus=rng.choice([0, 0, 1, 2, 4]),
        spec=spec,
    )
    if rng.random() < 0.2:
        port = rng.choice([9000, 9001])
        obj["spec"]["containers"][0]["ports"] = [{"containerPort": port, "hostPort": port}]
    return obj


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_random_clusters_and_pods_agree_with_kube_scheduler(
    kube: KubeClient, namespace: str, kube_scheduler: str, seed: int
) -> None:
    import random

    rng = random.Random(seed)
    tag = uuid.uuid4().hex[:6]
    for k in range(5):
        labels = {"diff": tag, "gpus": rng.choice(["4", "8"])}
        if rng.random() < 0.8:
            labels[ZONE] = f"z{tag}-{rng.choice('abc')}"
        if rng.random() < 0.6:
            labels["tier"] = rng.choice(["spot", "ondemand"])
        taints = []
        if rng.random() < 0.3:
            taints.append(
                rng.choice(
                    [
                        {"key": "dedicated", "value": "x", "effect": "NoSchedule"},
                        {"key": "maint", "value": "", "effect": "NoExecute"},
                        {"key": "soft", "value": "1", "effect": "PreferNoSchedule"},
                    ]
                )
            )
        await make_node(
            kube,
            f"r{tag}-{k}",
            labels=labels,
            taints=taints,
            unschedulable=rng.random() < 0.1,
            cpu=rng.choice(["4", "8", "16"]),
            gpus=rng.choice([0, 4, 8]),
            pods=rng.choice([3, 110]),
        )
    disagreements = []
    outcomes = {"bound": 0, "pending": 0}
    for i in range(15):
        obj = _random_pod(rng, f"p{i}", kube_scheduler, tag)
        node, message, ours = await compare(kube, namespace, obj)
        outcomes["pending" if node is None else "bound"] += 1
        if node is None:
            if not (isinstance(ours, Failure) and ours.message == message):
                said = ours.message if isinstance(ours, Failure) else f"bound to {ours.node}"
                disagreements.append((obj, message, said))
            await kube.delete(PODS, obj["metadata"]["name"], namespace=namespace)
        elif not (isinstance(ours, Decision) and ours.verdicts[node].status.is_success):
            disagreements.append((obj, node, getattr(ours, "message", None)))
    assert not disagreements, disagreements
    # both kinds were compared
    assert outcomes["bound"] > 0, outcomes
    assert outcomes["pending"] > 0, outcomes


async def test_host_port_conflicts_match(
    kube: KubeClient, namespace: str, kube_scheduler: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    for k in range(2):
        await make_node(kube, f"h{tag}-{k}", labels={"diff": tag})

    def with_port(name: str, node: str | None = None) -> dict[str, Any]:
        return pod_obj(
            name,
            scheduler=kube_scheduler,
            node=node,
            spec={"nodeSelector": {"diff": tag}},
            ports=[host_port(9000)],
        )

    await kube.create(PODS, with_port("holder", f"h{tag}-0"), namespace=namespace)
    node, _, ours = await compare(kube, namespace, with_port("second"))
    assert isinstance(ours, Decision)
    assert node == ours.node == f"h{tag}-1"
    node, message, ours = await compare(kube, namespace, with_port("third"))
    assert node is None
    assert isinstance(ours, Failure)
    assert ours.message == message


async def test_request_less_pods_spread_as_kube_counts_them(
    kube: KubeClient, namespace: str, kube_scheduler: str
) -> None:
    """Pods that request nothing count 100m and 200 MiB in kube's resource scoring (non-zero
    requests): on two small nodes, a holds three such pods and b none, so the next three go to
    b (b's score after each: cpu 90, 80, 70 against a's 60; memory alike), where equal scores
    would have sent them all to a, the first by name. A fourth would tie (kube: random)."""
    tag = uuid.uuid4().hex[:6]
    for k in "ab":
        await make_node(kube, f"z{tag}-{k}", labels={"diff": tag}, cpu="1", memory="2Gi")

    def bare(name: str, node: str | None = None) -> dict[str, Any]:
        return pod_obj(
            name,
            scheduler=kube_scheduler,
            node=node,
            cpu=None,
            memory=None,
            spec={"nodeSelector": {"diff": tag}},
        )

    for i in range(3):
        await kube.create(PODS, bare(f"there-{i}", f"z{tag}-a"), namespace=namespace)
    for i in range(3):
        node, _, ours = await compare(kube, namespace, bare(f"new-{i}"))
        assert isinstance(ours, Decision), getattr(ours, "message", "")
        assert (ours.node, node) == (f"z{tag}-b", f"z{tag}-b")


# --- default topology spreading (PodTopologySpread defaultingType: System) ------------------------


async def _selecting(kube: KubeClient, namespace: str, kind: str, app: str) -> dict[str, Any]:
    """A Service, StatefulSet or ReplicationController selecting ``app=<app>``; the
    ownerReference a pod it controls carries (``{}`` for a Service). No controller for these two
    kinds runs on the test control plane, so they make no pods of their own."""
    name = f"{app}-{kind.lower()}"
    meta = {"name": name}
    if kind == "Service":
        spec: dict[str, Any] = {"selector": {"app": app}, "ports": [{"port": 80}]}
        await kube.create(SERVICES, {"metadata": meta, "spec": spec}, namespace=namespace)
        return {}
    template = {
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    if kind == "StatefulSet":
        resource = OWNER_KINDS["StatefulSet"]
        spec = {
            "selector": {"matchLabels": {"app": app}},
            "serviceName": name,
            "template": template,
        }
    else:
        resource = REPLICATION_CONTROLLERS
        spec = {"replicas": 0, "selector": {"app": app}, "template": template}
    made = await kube.create(resource, {"metadata": meta, "spec": spec}, namespace=namespace)
    return {
        "apiVersion": resource.api_version,
        "kind": kind,
        "name": name,
        "uid": made["metadata"]["uid"],
        "controller": True,
    }


@pytest.mark.parametrize("kind", ["Service", "StatefulSet", "ReplicationController"])
async def test_default_spreading_moves_a_sibling_off_the_node_it_would_pack_onto(
    kube: KubeClient, namespace: str, kube_scheduler: str, kind: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    app = f"web-{tag}"
    owner = await _selecting(kube, namespace, kind, app)
    for k in range(3):
        await make_node(kube, f"s{tag}-{k}", labels={"diff": tag})

    def sibling(name: str, node: str | None = None, **kw: Any) -> dict[str, Any]:
        obj = pod_obj(
            name,
            scheduler=kube_scheduler,
            node=node,
            labels={"app": app},
            cpu="100m",
            memory="100Mi",
            spec={"nodeSelector": {"diff": tag}, **kw},
        )
        if owner:
            obj["metadata"]["ownerReferences"] = [owner]
        return obj

    # s-0 is the least used (resources alone would choose it) but holds a sibling; s-1 and s-2
    # hold other pods, s-2 more than s-1.
    await kube.create(PODS, sibling("web-0", f"s{tag}-0"), namespace=namespace)
    for k, cpu in ((1, "1"), (2, "2")):
        other = pod_obj(
            f"other-{k}", scheduler=kube_scheduler, node=f"s{tag}-{k}", cpu=cpu, memory="100Mi"
        )
        await kube.create(PODS, other, namespace=namespace)
    node, _, ours = await compare(kube, namespace, sibling("web-1"))
    assert isinstance(ours, Decision), getattr(ours, "message", "")
    assert node == ours.node == f"s{tag}-1"

    # A pod with constraints of its own is spread by those alone: none counts a placed pod
    # here, so resources decide, and s-0 (the least used still) it is.
    own = {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": f"nobody-{tag}"}},
            }
        ]
    }
    node, _, ours = await compare(kube, namespace, sibling("web-2", **own))
    assert isinstance(ours, Decision), getattr(ours, "message", "")
    assert node == ours.node == f"s{tag}-0"


async def test_volume_messages_and_nodes_match(
    kube: KubeClient, namespace: str, kube_scheduler: str
) -> None:
    """Claims missing, unbound with Immediate binding, bound to a local PV, waiting for their
    first consumer with and without a PV to take, a ReadWriteOncePod claim in use, and CSI
    volumes over the nodes' CSINode limits: VolumeBinding's, VolumeRestrictions' and
    NodeVolumeLimits' verdicts on both sides (the shared control plane's
    PV binder completes kube-scheduler's bindings)."""
    tag = uuid.uuid4().hex[:6]
    for n in ("a", "b", "c"):
        name = f"v{tag}-{n}"
        await make_node(kube, name, labels={"diff": tag, "kubernetes.io/hostname": name})
    only_ours = {"nodeSelector": {"diff": tag}}

    def with_claim(name: str, claim_name: str) -> dict[str, Any]:
        volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
        return pod_obj(name, scheduler=kube_scheduler, spec={**only_ours, "volumes": volumes})

    def pvc(name: str, cls: str, *, volume: str = "") -> dict[str, Any]:
        out = claim(name, cls=cls, volume=volume)
        out["metadata"] = {"name": name}
        out.pop("status")
        return out

    def pv(name: str, node: str, cls: str) -> dict[str, Any]:
        out = local_pv(f"{name}-{tag}", node, cls=cls)
        out.pop("status")
        out["spec"]["persistentVolumeReclaimPolicy"] = "Retain"
        return out

    # A claim that does not exist.
    node, message, ours = await compare(kube, namespace, with_claim("missing", "nothing"))
    assert node is None
    assert isinstance(ours, Failure)
    assert ours.message == message

    # Unbound, Immediate: the class exists but no PV of it does.
    await kube.create(STORAGE_CLASSES, storage_class(f"now-{tag}", mode="Immediate"))
    await kube.create(PERSISTENT_VOLUME_CLAIMS, pvc("now", f"now-{tag}"), namespace=namespace)
    node, message, ours = await compare(kube, namespace, with_claim("immediate", "now"))
    assert node is None
    assert isinstance(ours, Failure)
    assert ours.message == message

    # WaitForFirstConsumer without a provisioner, no PV: no node can bind it.
    wffc = f"local-{tag}"
    await kube.create(STORAGE_CLASSES, storage_class(wffc))
    await kube.create(PERSISTENT_VOLUME_CLAIMS, pvc("later", wffc), namespace=namespace)
    node, message, ours = await compare(kube, namespace, with_claim("no-pv", "later"))
    assert node is None
    assert isinstance(ours, Failure)
    assert ours.message == message

    # A local PV on node c, of a class of its own (kube-scheduler retries "no-pv" and would take
    # it for "later" otherwise): the waiting claim takes it, on c, on both sides.
    own = f"local2-{tag}"
    await kube.create(STORAGE_CLASSES, storage_class(own))
    await kube.create(PERSISTENT_VOLUMES, pv("pv-c", f"v{tag}-c", own))
    await wait_for_object(  # a new PV is Pending until the PV binder has seen it
        kube,
        PERSISTENT_VOLUMES,
        f"pv-c-{tag}",
        lambda v: (v.get("status") or {}).get("phase") == "Available",
        what="the PV binder to make the PV Available",
    )
    await kube.create(PERSISTENT_VOLUME_CLAIMS, pvc("later2", own), namespace=namespace)
    node, message, ours = await compare(kube, namespace, with_claim("takes-pv", "later2"))
    assert isinstance(ours, Decision), ours
    assert (ours.node, node) == (f"v{tag}-c", f"v{tag}-c")

    # A claim bound to a local PV on node b (pre-bound both ways; the PV binder completes it).
    await kube.create(PERSISTENT_VOLUMES, pv("pv-b", f"v{tag}-b", f"bound-{tag}"))
    await kube.create(
        PERSISTENT_VOLUME_CLAIMS,
        pvc("bound", f"bound-{tag}", volume=f"pv-b-{tag}"),
        namespace=namespace,
    )
    await wait_for_object(
        kube,
        PERSISTENT_VOLUME_CLAIMS,
        "bound",
        lambda c: (c.get("status") or {}).get("phase") == "Bound",
        namespace=namespace,
        what="the PV binder to bind the claim",
    )
    node, message, ours = await compare(kube, namespace, with_claim("follows", "bound"))
    assert isinstance(ours, Decision), ours
    assert (ours.node, node) == (f"v{tag}-b", f"v{tag}-b")

    # A ReadWriteOncePod claim that a pod on node a uses (bound by hand): VolumeRestrictions.
    solo_pv = pv("pv-solo", f"v{tag}-a", f"solo-{tag}")
    solo_pv["spec"].pop("nodeAffinity")
    solo_pv["spec"]["hostPath"] = solo_pv["spec"].pop("local")  # any node reaches it
    solo_pv["spec"]["accessModes"] = ["ReadWriteOncePod"]
    solo = pvc("solo", f"solo-{tag}", volume=f"pv-solo-{tag}")
    solo["spec"]["accessModes"] = ["ReadWriteOncePod"]
    await kube.create(PERSISTENT_VOLUMES, solo_pv)
    await kube.create(PERSISTENT_VOLUME_CLAIMS, solo, namespace=namespace)
    await wait_for_object(
        kube,
        PERSISTENT_VOLUME_CLAIMS,
        "solo",
        lambda c: (c.get("status") or {}).get("phase") == "Bound",
        namespace=namespace,
        what="the PV binder to bind the claim",
    )
    holder = with_claim("holder", "solo")
    holder["spec"]["nodeName"] = f"v{tag}-a"
    await kube.create(PODS, holder, namespace=namespace)
    node, message, ours = await compare(kube, namespace, with_claim("second", "solo"))
    assert node is None
    assert isinstance(ours, Failure)
    assert ours.message == message

    # CSI volumes: node a may attach one (a pod there holds it), b one (a volume no pod uses
    # is still attached there), c none.
    for n, count in (("a", 1), ("b", 1), ("c", 0)):
        await kube.create(CSI_NODES, csi_node(f"v{tag}-{n}", ebs=count))
    await kube.create(VOLUME_ATTACHMENTS, attachment(f"va-{tag}", f"v{tag}-b", f"pv-e3-{tag}"))
    for name in ("e1", "e2", "e3"):
        volume = csi_pv(
            f"pv-{name}-{tag}", {"csi": {"driver": EBS, "volumeHandle": f"{name}-{tag}"}}
        )
        volume.pop("status")
        volume["spec"]["storageClassName"] = f"csi-{tag}"
        volume["spec"]["persistentVolumeReclaimPolicy"] = "Retain"
        await kube.create(PERSISTENT_VOLUMES, volume)
        made = pvc(name, f"csi-{tag}", volume=f"pv-{name}-{tag}")
        await kube.create(PERSISTENT_VOLUME_CLAIMS, made, namespace=namespace)
        await wait_for_object(
            kube,
            PERSISTENT_VOLUME_CLAIMS,
            name,
            lambda c: (c.get("status") or {}).get("phase") == "Bound",
            namespace=namespace,
            what="the PV binder to bind the claim",
        )
    attached = with_claim("attached", "e1")
    attached["spec"]["nodeName"] = f"v{tag}-a"
    await kube.create(PODS, attached, namespace=namespace)
    node, message, ours = await compare(kube, namespace, with_claim("over", "e2"))
    assert node is None
    assert isinstance(ours, Failure)
    assert "3 node(s) exceed max volume count" in message
    assert ours.message == message
    node, message, ours = await compare(kube, namespace, with_claim("shares", "e1"))
    assert isinstance(ours, Decision), ours
    assert (ours.node, node) == (f"v{tag}-a", f"v{tag}-a")
    ebs = {"name": "d", "awsElasticBlockStore": {"volumeID": f"vol-{tag}"}}  # inline
    inline = pod_obj("inline", scheduler=kube_scheduler, spec={**only_ours, "volumes": [ebs]})
    node, message, ours = await compare(kube, namespace, inline)
    assert node is None
    assert isinstance(ours, Failure)
    assert "3 node(s) exceed max volume count" in message
    assert ours.message == message
