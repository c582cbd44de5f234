"""NVIDIA's DRA driver, as far as the API server sees it: DeviceClasses and ResourceSlices.

``devcluster up --dra`` and the tests (``tests/support/dra.py``) publish, for a node built from a
hardware profile, what NVIDIA's DRA driver for GPUs (``k8s-dra-driver-gpu``, driver name
``gpu.nvidia.com``) publishes on such a machine, in the same shapes:

- DeviceClass ``gpu.nvidia.com`` (devices of the driver with ``type == 'gpu'``; it declares
  ``extendedResourceName: nvidia.com/gpu``, so unchanged ``nvidia.com/gpu`` pods are served by DRA,
  KEP-5004) and ``mig.nvidia.com`` (``type == 'mig'``);
- one ResourceSlice per node (``generateName: <node>-gpu.nvidia.com-``, owned by its Node, as the
  kubelet plugin's helper makes it): ``driver: gpu.nvidia.com``, pool named after the node,
  ``nodeName`` the node. A GPU not in MIG mode is device ``gpu-<minor>`` with attributes
  ``type: gpu``, ``uuid``, ``productName``, ``brand``, ``architecture``, ``cudaComputeCapability``,
  ``driverVersion``, ``cudaDriverVersion`` (versions as semver), ``resource.kubernetes.io/pciBusID``
  and ``resource.kubernetes.io/pcieRoot``, capacity ``memory``; a GPU in MIG mode is published as
  its MIG devices only (``gpu-<minor>-mig-<profile>-<profile id>-<placement start>``,
  ``type: mig``, ``uuid``, ``parentUUID``, ``profile``, the parent's other attributes, capacity
  ``memory``, ``multiprocessors`` and one ``memorySlice<i>`` per memory slice it occupies).

Shareable GPUs (``shared=True``; ``devcluster up --dra-shared``): each whole GPU is published
with ``allowMultipleAllocations: true`` so several claims share it through consumable capacity
(KEP-5075, beta and on by default in Kubernetes 1.36): capacity ``memory`` (its total, no
request policy: a claim takes what ``capacity.requests.memory`` asks, the whole memory when it
asks none) and ``compute``, a percentage of the GPU's time (``100``; request policy default
``10``, range 1–100 in steps of 1), the counter-free names a claim asks with
``capacity.requests``. NVIDIA's driver itself publishes whole GPUs exclusive and applies
time-slicing or MPS from the claim's ``GpuConfig``; a shareable GPU is this publisher's
stand-in for the consumable-capacity model, off by default.

Everything comes from the same fake NVML and fake sysfs the node's agent reads
(``agent.devices.ProfileSource`` with the node's name as hostname), so the ``uuid`` of
``gpu-3`` is the UUID the agent reports for GPU 3, and ``pcieRoot`` is the root complex of the
fake sysfs tree (``pci0000:XX``) — the join the coordinator makes between DRA devices and its
inventory. Known differences from the real driver: the minor number is the NVML index; values
the profile does not give (e.g. the driver version of ``dgx1-v100``) are left out; MIG capacity
lacks the engine counts (copy engines, decoders, …), which the profiles do not record; a GPU
instance split into several compute instances gets the compute instance id appended to each name,
where the real driver has no answer.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from agent.devices import ProfileSource
from agent.devices.mig_catalog import GiProfile
from agent.devices.profile import Profile, mig_geometry
from agent.devices.sysfs import sysfs_bdf
from common.kube import DEVICE_CLASSES, NODES, RESOURCE_SLICES, KubeClient, NotFound
from common.model import Gpu, MigInstance
from devcluster.pods import pod

DRIVER: Final = "gpu.nvidia.com"
GPU_CLASS: Final = "gpu.nvidia.com"
MIG_CLASS: Final = "mig.nvidia.com"
EXTENDED_RESOURCE: Final = "nvidia.com/gpu"
PCI_BUS_ID: Final = "resource.kubernetes.io/pciBusID"
PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"
#: A shareable GPU's compute capacity: percent of its time (request policy below).
COMPUTE: Final = "compute"
_COMPUTE_POLICY: Final = {"default": "10", "validRange": {"min": "1", "max": "100", "step": "1"}}

_ARCHITECTURES: Final = (  # compute capability major (and minor) → NVML's architecture name
    ((3, None), "Kepler"),
    ((5, None), "Maxwell"),
    ((6, None), "Pascal"),
    ((7, 5), "Turing"),
    ((7, None), "Volta"),
    ((8, 9), "Ada Lovelace"),
    ((8, None), "Ampere"),
    ((9, None), "Hopper"),
    ((10, None), "Blackwell"),
    ((12, None), "Blackwell"),
)


class DraPublishError(RuntimeError):
    """The devices could not be published; the message says why."""


def device_classes() -> list[dict[str, Any]]:
    """The two DeviceClasses NVIDIA's Helm chart installs (GPUs enabled)."""

    def selector(kind: str) -> list[dict[str, Any]]:
        cel = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'"
        return [{"cel": {"expression": cel}}]

    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": GPU_CLASS},
            "spec": {"selectors": selector("gpu"), "extendedResourceName": EXTENDED_RESOURCE},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": MIG_CLASS},
            "spec": {"selectors": selector("mig")},
        },
    ]


def semver(text: str | None) -> str | None:
    """``"555.42.02"`` → ``"555.42.2"``, ``"8.0"`` → ``"8.0.0"`` (what ``semver.MustParse(…)
    .String()`` gives); ``None`` for nothing or something that is no version."""
    if not text:
        return None
    parts = text.strip().split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    return ".".join(str(int(p)) for p in parts + ["0"] * (3 - len(parts)))


def architecture(compute_capability: str | None) -> str | None:
    """NVML's architecture name for a compute capability (``"8.0"`` → ``"Ampere"``)."""
    version = semver(compute_capability)
    if version is None:
        return None
    major, minor, _ = (int(p) for p in version.split("."))
    for (want_major, want_minor), name in _ARCHITECTURES:
        if major == want_major and want_minor in (None, minor):
            return name
    return "Unknown"


def brand(product: str | None) -> str:
    """NVML's brand as go-nvlib spells it, from the product name."""
    name = (product or "").lower()
    for word, value in (("geforce", "GeForce"), ("quadro", "Quadro"), ("tesla", "Tesla")):
        if word in name:
            return value
    return "Nvidia"


def _quantity(n_bytes: int) -> str:
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n_bytes % size == 0 and n_bytes >= size:
            return f"{n_bytes // size}{unit}"
    return str(n_bytes)


def _attributes(values: Mapping[str, tuple[str, str | None]]) -> dict[str, dict[str, str]]:
    """``{"uuid": ("string", "GPU-…")}`` → ``{"uuid": {"string": "GPU-…"}}``, unknowns left out."""
    return {name: {kind: value} for name, (kind, value) in values.items() if value is not None}


def _common(
    gpu: Gpu, *, driver_version: str | None, cuda_version: str | None, pcie_root: str | None
) -> dict[str, tuple[str, str | None]]:
    return {
        "productName": ("string", gpu.product),
        "brand": ("string", brand(gpu.product)),
        "architecture": ("string", architecture(gpu.compute_capability)),
        "cudaComputeCapability": ("version", semver(gpu.compute_capability)),
        "driverVersion": ("version", semver(driver_version)),
        "cudaDriverVersion": ("version", semver(cuda_version)),
        PCI_BUS_ID: ("string", sysfs_bdf(gpu.pci_bus_id) if gpu.pci_bus_id else None),
        PCIE_ROOT: ("string", pcie_root),
    }


def _mig_device(
    gpu: Gpu,
    mig: MigInstance,
    common: Mapping[str, tuple[str, str | None]],
    *,
    gi: GiProfile | None,
    split: bool,
) -> dict[str, Any]:
    gi_name = mig.profile.split(".", 1)[1] if split else mig.profile
    slug = re.sub(r"[^a-z0-9-]", "-", gi_name.replace(".", "").lower())
    name = f"gpu-{gpu.index}-mig-{slug}-{gi.id if gi else 0}-{mig.placement_start}"
    if split and mig.ci_id is not None:
        name += f"-{mig.ci_id}"
    attributes = {
        "type": ("string", "mig"),
        "uuid": ("string", mig.uuid),
        "parentUUID": ("string", gpu.uuid),
        "profile": ("string", mig.profile),
        **common,
    }
    capacity = {"memory": {"value": _quantity(mig.memory_mib << 20)}}
    if gi is not None:  # a compute instance gets its share of the GPU instance's SMs
        capacity["multiprocessors"] = {"value": str(gi.sms * mig.slices // gi.slices)}
    for i in range(mig.placement_start, mig.placement_start + mig.placement_size):
        capacity[f"memorySlice{i}"] = {"value": "1"}
    return {"name": name, "attributes": _attributes(attributes), "capacity": capacity}


def gpu_devices(
    gpus: Iterable[Gpu],
    *,
    driver_version: str | None,
    cuda_version: str | None,
    pcie_roots: Mapping[int, str],
    mig_profiles: Mapping[tuple[int, str], GiProfile] | None = None,
    shared: bool = False,
) -> list[dict[str, Any]]:
    """The slice's ``devices`` for these GPUs (see the module doc). ``pcie_roots``: GPU index →
    root complex; ``mig_profiles``: (GPU index, GPU-instance profile name) → its NVML profile;
    ``shared``: whole GPUs allow multiple allocations (consumable capacity)."""
    profiles = mig_profiles or {}
    devices: list[dict[str, Any]] = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        common = _common(
            gpu,
            driver_version=driver_version,
            cuda_version=cuda_version,
            pcie_root=pcie_roots.get(gpu.index),
        )
        if not gpu.mig_enabled:
            attributes = {"type": ("string", "gpu"), "uuid": ("string", gpu.uuid), **common}
            device: dict[str, Any] = {"name": f"gpu-{gpu.index}", "attributes": {}}
            device["attributes"] = _attributes(attributes)
            if gpu.memory_total_mib:
                device["capacity"] = {"memory": {"value": _quantity(gpu.memory_total_mib << 20)}}
            if shared:
                device["allowMultipleAllocations"] = True
                device.setdefault("capacity", {})[COMPUTE] = {
                    "value": "100",
                    "requestPolicy": _COMPUTE_POLICY,
                }
            devices.append(device)
            continue
        per_gi: dict[int, int] = {}
        for mig in gpu.mig_instances:
            per_gi[mig.gi_id] = per_gi.get(mig.gi_id, 0) + 1
        for mig in sorted(gpu.mig_instances, key=lambda m: (m.placement_start, m.ci_id or 0)):
            if mig.uuid is None:
                continue  # a GPU instance without a compute instance is no device yet
            split = per_gi[mig.gi_id] > 1 or mig.profile.count(".") > 1
            gi_name = mig.profile.split(".", 1)[1] if split else mig.profile
            gi = profiles.get((gpu.index, gi_name))
            devices.append(_mig_device(gpu, mig, common, gi=gi, split=split))
    return devices


def node_devices(
    profile: str | Path | Profile, node: str, *, shared: bool = False
) -> list[dict[str, Any]]:
    """The devices NVIDIA's driver would publish on ``node``, a machine of ``profile`` (its
    fake NVML and sysfs, with ``node`` as hostname, as the node's agent runs them); ``shared``:
    whole GPUs shareable. ``ValueError`` for an unknown or broken profile."""
    with ProfileSource(profile, hostname=node) as source:
        topology = source.discover()
        roots: dict[int, str] = {}
        for gpu in topology.gpus:
            path = source.sysfs.pci_path(sysfs_bdf(gpu.pci_bus_id)) if gpu.pci_bus_id else None
            if path is not None:
                roots[gpu.index] = path.root
        mig_profiles: dict[tuple[int, str], GiProfile] = {}
        for index, spec in enumerate(source.profile.gpus):
            geometry = mig_geometry(spec)
            for gi in geometry.profiles if geometry is not None else ():
                mig_profiles[(index, gi.name)] = gi
    return gpu_devices(
        topology.gpus,
        driver_version=topology.driver_version,
        cuda_version=topology.cuda_version,
        pcie_roots=roots,
        mig_profiles=mig_profiles,
        shared=shared,
    )


def resource_slice(
    node: str,
    devices: list[dict[str, Any]],
    *,
    node_uid: str | None = None,
    generation: int = 1,
) -> dict[str, Any]:
    """The node's one ResourceSlice (a pool of one slice named after the node)."""
    metadata: dict[str, Any] = {"generateName": f"{node}-{DRIVER}-"}
    if node_uid is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


async def publish_classes(kube: KubeClient) -> None:
    """Create the DeviceClasses, or bring existing ones back to NVIDIA's spec."""
    for body in device_classes():
        name = body["metadata"]["name"]
        try:
            current = await kube.get(DEVICE_CLASSES, name)
        except NotFound:
            await kube.create(DEVICE_CLASSES, body)
            continue
        if current.get("spec") != body["spec"]:
            await kube.replace(DEVICE_CLASSES, name, {**current, "spec": body["spec"]})


async def node_slices(kube: KubeClient, node: str) -> list[dict[str, Any]]:
    """This driver's ResourceSlices of ``node``."""
    listed = await kube.list(
        RESOURCE_SLICES, field_selector=f"spec.nodeName={node},spec.driver={DRIVER}"
    )
    return list(listed["items"])


async def publish_node(
    kube: KubeClient, node: str, profile: str | Path | Profile, *, shared: bool = False
) -> dict[str, Any]:
    """Publish (or republish, with the pool's generation bumped) ``node``'s slice; returns it.
    ``shared``: whole GPUs shareable (consumable capacity). ``DraPublishError`` when the Node
    does not exist or the profile is unusable."""
    try:
        node_obj = await kube.get(NODES, node)
    except NotFound:
        raise DraPublishError(f"node {node} does not exist: create the Node first") from None
    try:
        devices = node_devices(profile, node, shared=shared)
    except (ValueError, OSError, KeyError) as exc:
        text = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        raise DraPublishError(f"profile {profile}: {text}") from None
    existing = await node_slices(kube, node)
    generation = 1 + max((s["spec"]["pool"]["generation"] for s in existing), default=0)
    body = resource_slice(
        node, devices, node_uid=node_obj["metadata"]["uid"], generation=generation
    )
    created = await kube.create(RESOURCE_SLICES, body)
    for old in existing:
        with contextlib.suppress(NotFound):
            await kube.delete(RESOURCE_SLICES, old["metadata"]["name"], uid=old["metadata"]["uid"])
    return created


async def unpublish_node(kube: KubeClient, node: str) -> None:
    """Delete ``node``'s slices (as the driver does when it is uninstalled)."""
    for old in await node_slices(kube, node):
        with contextlib.suppress(NotFound):
            await kube.delete(RESOURCE_SLICES, old["metadata"]["name"], uid=old["metadata"]["uid"])


def _requests(gpus: int, device_class: str) -> list[dict[str, Any]]:
    exactly = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": gpus}
    return [{"name": "gpus", "exactly": exactly}]


def claim_template(name: str, gpus: int, *, device_class: str = GPU_CLASS) -> dict[str, Any]:
    """A ResourceClaimTemplate for ``gpus`` devices of ``device_class`` (request ``gpus``)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": _requests(gpus, device_class)}}},
    }


def claim(
    name: str, gpus: int, *, device_class: str = GPU_CLASS, namespace: str | None = None
) -> dict[str, Any]:
    """A ResourceClaim for ``gpus`` devices of ``device_class`` (request ``gpus``)."""
    meta = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": _requests(gpus, device_class)}},
    }


def claim_pod(
    name: str,
    *,
    template: str | None = None,
    claim_name: str | None = None,
    gpus: int | None = None,
    scheduler: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    namespace: str | None = None,
    gang: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """A pod whose container uses the claim ``gpus`` (from ``template`` or the existing
    ``claim_name``), or, with ``gpus``, one that asks ``nvidia.com/gpu`` like any pod; ``gang``
    makes it a member of a Topos gang."""
    spec: dict[str, Any] = {"restartPolicy": "Never"}
    if template is not None or claim_name is not None:
        source = (
            {"resourceClaimTemplateName": template}
            if template is not None
            else {"resourceClaimName": claim_name}
        )
        spec["resourceClaims"] = [{"name": "gpus", **source}]
    obj = pod(
        name,
        gpus=gpus or 0,
        cpu=None,
        memory=None,
        namespace=namespace,
        gang=gang,
        scheduler=scheduler,
        node_selector=node_selector,
        spec=spec,
    )
    if "resourceClaims" in spec and gpus is None:
        obj["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    return obj
