"""The hardware model of one GPU node (docs/design.md §1).

Every structure is a frozen ``msgspec.Struct``: one discovery produces one immutable snapshot, the
agent's labelers read it, the stream ships it as MessagePack, the coordinator's inventory keeps it,
and the API renders it as JSON. ``None`` in a field means *unknown* (the hardware refused to say),
never "zero" or "false".

The GPU×GPU link matrix uses the vocabulary of ``nvidia-smi topo -m``:

``X``     the GPU itself
``NV<n>`` joined by *n* bonded NVLinks
``PIX``   at most one PCIe bridge between them
``PXB``   several PCIe bridges, no host bridge
``PHB``   through a PCIe host bridge (the CPU's root complex)
``NODE``  across host bridges inside one NUMA node
``SYS``   across the inter-socket link (QPI/UPI/Infinity Fabric)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from itertools import combinations
from typing import Final, Literal

import msgspec

LinkKind = Literal["X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS"]

# Lower is closer. NVLink beats every PCIe path; among NVLinks, more links is better.
_LINK_RANK: Final[dict[str, int]] = {
    "X": 0,
    "NV": 1,
    "PIX": 2,
    "PXB": 3,
    "PHB": 4,
    "NODE": 5,
    "SYS": 6,
}
_LINK_RE: Final = re.compile(r"^(X|NV(\d{1,3})|PIX|PXB|PHB|NODE|SYS)$")


class ModelError(ValueError):
    """A value that cannot be part of the hardware model (bad link cell, bad CPU list, …)."""


class Link(msgspec.Struct, frozen=True, order=True):
    """One cell of the link matrix."""

    kind: str
    nvlinks: int = 0

    @classmethod
    def parse(cls, text: str) -> Link:
        m = _LINK_RE.match(text.strip())
        if m is None:
            raise ModelError(
                f"unknown link {text!r}; expected X, NV<n>, PIX, PXB, PHB, NODE or SYS"
            )
        if m.group(2) is not None:
            n = int(m.group(2))
            if n < 1:
                raise ModelError(f"link {text!r} has no NVLinks")
            return cls("NV", n)
        return cls(m.group(1))

    @property
    def rank(self) -> int:
        """Distance class: 0 for the GPU itself, 1 for NVLink, … 6 for SYS."""
        return _LINK_RANK[self.kind]

    @property
    def is_nvlink(self) -> bool:
        return self.kind == "NV"

    def sort_key(self) -> tuple[int, int]:
        """Ascending key: closer first, then more NVLinks first."""
        return (self.rank, -self.nvlinks)

    def __str__(self) -> str:
        return f"NV{self.nvlinks}" if self.kind == "NV" else self.kind


def format_cpulist(cpus: Iterable[int]) -> str:
    """``[0,1,2,3,8,9]`` → ``"0-3,8-9"`` (the kernel's cpulist format)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def parse_cpulist(text: str) -> tuple[int, ...]:
    """``"0-3,8-9"`` → ``(0, 1, 2, 3, 8, 9)``. Empty text (or ``N/A``) is the empty set."""
    text = text.strip()
    if text in ("", "N/A"):
        return ()
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ModelError(f"bad CPU list {text!r}: {part!r} is not a number or range") from None
        if a < 0 or b < a or b - a > 65536:
            raise ModelError(f"bad CPU list {text!r}: range {part!r}")
        cpus.update(range(a, b + 1))
    return tuple(sorted(cpus))


class MigInstance(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A MIG GPU instance (with its compute instance, when one exists)."""

    profile: str  # "1g.10gb", "3g.40gb", "1c.3g.40gb" for a compute-instance split
    gi_id: int
    ci_id: int | None = None
    placement_start: int
    placement_size: int
    memory_mib: int
    slices: int  # compute slices ("3" in 3g.40gb)
    uuid: str | None = None  # MIG-… device UUID; unknown before a compute instance exists


class MigProfileCapacity(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """How many instances of one GPU-instance profile could still be created."""

    profile: str
    free: int
    total: int  # instances of this profile an empty GPU holds
    memory_mib: int
    slices: int


HealthStatus = Literal["ok", "degraded", "unhealthy"]


class NvLinkHealth(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One NVLink port of a GPU: its state and error counters (NVML, since the driver loaded).

    ``None`` counters: the GPU or driver does not report them. ``status``/``reason`` and the
    ``*_in_window`` figures are the agent's verdict (docs/health.md), not NVML's."""

    link: int
    up: bool = True
    peer_bus_id: str | None = None  # the GPU or NVSwitch at the other end
    crc_errors: int | None = None  # receive CRC errors (flit + data)
    replay_errors: int | None = None
    recovery_errors: int | None = None
    crc_in_window: int | None = None  # rise over the agent's window (None: too few samples)
    replay_in_window: int | None = None
    recovery_in_window: int | None = None
    status: HealthStatus = "ok"
    reason: str | None = None


class GpuFabric(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """NVML's GPU fabric info (multi-node NVLink: GB200/GB300 NVL72)."""

    state: str  # not_started | in_progress | completed
    cluster_uuid: str | None = None
    clique_id: int | None = None
    status: str | None = None  # the fabric probe's result ("Success" or NVML's error)
    health_mask: int | None = None  # NVML_GPU_FABRIC_HEALTH_MASK_* bits, when the driver has them
    degraded_bandwidth: bool | None = None
    route_recovery: bool | None = None
    route_unhealthy: bool | None = None
    access_timeout_recovery: bool | None = None

    @property
    def clique(self) -> str | None:
        """``<clusterUUID>.<cliqueId>`` as GFD writes ``nvidia.com/gpu.clique``."""
        if self.state != "completed" or not self.cluster_uuid or self.clique_id is None:
            return None
        return f"{self.cluster_uuid}.{self.clique_id}"


class GpuHealth(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A GPU's health as NVML reports it, read every discovery cycle (docs/health.md).

    Every counter is ``None`` when NVML answers NotSupported (older GPUs and drivers). The
    agent's monitor fills ``status`` and ``reasons`` from thresholds over a window."""

    ecc_corrected: int | None = None  # volatile (since the driver loaded)
    ecc_uncorrected: int | None = None
    retired_pages_single_bit: int | None = None
    retired_pages_double_bit: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_corrected: int | None = None
    remapped_rows_uncorrected: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    clocks_event_reasons: tuple[str, ...] | None = None  # "hw_slowdown", "sw_thermal", …
    nvlinks: tuple[NvLinkHealth, ...] = ()
    fabric: GpuFabric | None = None
    xids: tuple[int, ...] = ()  # XIDs NVML's events reported since the agent started
    status: HealthStatus = "ok"
    reasons: tuple[str, ...] = ()


class Gpu(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    index: int
    uuid: str
    product: str | None = None
    memory_total_mib: int | None = None
    memory_free_mib: int | None = None
    compute_capability: str | None = None  # "8.0"
    pci_bus_id: str | None = None  # "00000000:07:00.0"
    numa_node: int | None = None
    cpu_affinity: tuple[int, ...] | None = None
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None
    pcie_gen_current: int | None = None
    pcie_width_current: int | None = None
    power_limit_w: float | None = None
    mig_capable: bool | None = None
    mig_enabled: bool | None = None
    mig_instances: tuple[MigInstance, ...] = ()
    mig_creatable: tuple[MigProfileCapacity, ...] = ()
    healthy: bool = True
    health_reason: str | None = None
    # NUMA nodes near the GPU as `nvidia-smi topo -m` prints them ("NUMA Affinity"; Grace Hopper:
    # "0,5-11"); numa_node is the first of them. () = none visible, None = unknown.
    numa_affinity: tuple[int, ...] | None = None
    # The GPU's own memory as a NUMA node ("GPU NUMA ID"; coherent C2C parts such as GH200).
    memory_numa_node: int | None = None
    health: GpuHealth | None = None  # None: not read (profiles without NVML health, old agents)


class Nic(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str  # "mlx5_0" / "NIC0"
    pci_bus_id: str | None = None
    numa_node: int | None = None


class NumaNode(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    id: int
    cpus: tuple[int, ...]
    memory_mib: int | None = None


class NodeTopology(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Everything the agent knows about one node's hardware, as of one discovery."""

    hostname: str
    driver_version: str | None = None
    cuda_version: str | None = None  # "12.4"
    gpus: tuple[Gpu, ...] = ()
    # links[i][j] is the cell of `nvidia-smi topo -m` between GPU i and GPU j ("X" on the diagonal)
    links: tuple[tuple[str, ...], ...] = ()
    nvswitch: bool = False
    nics: tuple[Nic, ...] = ()
    # nic_links[i][k] is the cell between GPU i and NIC k
    nic_links: tuple[tuple[str, ...], ...] = ()
    # nic_nic_links[k][l] is the cell between NIC k and NIC l ("X" on the diagonal), when known
    nic_nic_links: tuple[tuple[str, ...], ...] = ()
    numa_nodes: tuple[NumaNode, ...] = ()
    cpu_count: int | None = None
    memory_mib: int | None = None
    source: str = "nvml"  # "nvml" or "profile:<name>"

    def __post_init__(self) -> None:
        n = len(self.gpus)
        if len(self.links) != n or any(len(row) != n for row in self.links):
            raise ModelError(f"link matrix must be {n}x{n} for {n} GPUs")
        _check_links(self.links)
        if self.nic_links and (
            len(self.nic_links) != n or any(len(r) != len(self.nics) for r in self.nic_links)
        ):
            raise ModelError(f"NIC link matrix must be {n}x{len(self.nics)}")
        for i, gpu in enumerate(self.gpus):
            if gpu.index != i:
                raise ModelError(f"GPU at position {i} has index {gpu.index}")

    def link(self, i: int, j: int) -> Link:
        return _parse_cached(self.links[i][j])

    def gpu_by_uuid(self, uuid: str) -> Gpu | None:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        return None


_LINK_CACHE: dict[str, Link] = {}


_LINK_CACHE_MAX: Final = 1024  # valid cells are few; odd spellings past this are parsed each time


#: Link matrices found valid: alike machines share one, and a topology is checked on every
#: decode and copy (5,000 nodes listed at a coordinator's start-up).
_VALID_LINKS: set[tuple[tuple[str, ...], ...]] = set()


def _check_links(links: tuple[tuple[str, ...], ...]) -> None:
    if links in _VALID_LINKS:
        return
    for i, row in enumerate(links):
        for j, cell in enumerate(row):
            link = _parse_cached(cell)
            if (i == j) != (link.kind == "X"):
                raise ModelError(f"link[{i}][{j}] = {cell!r}: X belongs on the diagonal only")
            if _parse_cached(links[j][i]) != link:
                raise ModelError(f"link matrix is not symmetric at [{i}][{j}]")
    if len(_VALID_LINKS) < _LINK_CACHE_MAX:
        _VALID_LINKS.add(links)


def _parse_cached(cell: str) -> Link:
    """``Link.parse`` remembered per cell text (a node's matrix is checked on every decode)."""
    link = _LINK_CACHE.get(cell)
    if link is None:
        link = Link.parse(cell)
        if len(_LINK_CACHE) < _LINK_CACHE_MAX:
            _LINK_CACHE[cell] = link
    return link


def weakest(links: Iterable[Link]) -> Link:
    """The weakest of ``links`` (the first of equals; ``X`` for none)."""
    worst = Link("X")
    for link in links:
        if link.sort_key() > worst.sort_key():
            worst = link
    return worst


def worst_link(topology: NodeTopology, gpus: Sequence[int]) -> Link:
    """The weakest link among a set of GPUs (``X`` for one GPU)."""
    return weakest(topology.link(a, b) for a, b in combinations(gpus, 2))


def gpu_family(compute_capability: str | None) -> str | None:
    """NVIDIA architecture name for a compute capability (GFD's ``gpu.family``)."""
    if compute_capability is None:
        return None
    major, _, minor = compute_capability.partition(".")
    families = {
        "3": "kepler",
        "5": "maxwell",
        "6": "pascal",
        "7": "volta",
        "8": "ampere",
        "9": "hopper",
        "10": "blackwell",
        "12": "blackwell",
    }
    if major == "7" and minor == "5":
        return "turing"
    if major == "8" and minor == "9":
        return "ada-lovelace"
    return families.get(major)


def topology_class(topology: NodeTopology) -> str:
    """``nvswitch`` | ``nvlink`` | ``pcie`` for the whole node (label ``topos.io/gpu.topology``)."""
    if topology.nvswitch:
        return "nvswitch"
    n = len(topology.gpus)
    if any(topology.link(i, j).is_nvlink for i in range(n) for j in range(n) if i != j):
        return "nvlink"
    return "pcie"


# Cached encoders/decoders: the model travels as MessagePack (stream) and JSON (annotation, API).
_MSGPACK_ENC: Final = msgspec.msgpack.Encoder()
_MSGPACK_DEC: Final = msgspec.msgpack.Decoder(NodeTopology)
_JSON_ENC: Final = msgspec.json.Encoder()
_JSON_DEC: Final = msgspec.json.Decoder(NodeTopology)


def topology_to_json(topology: NodeTopology) -> bytes:
    return _JSON_ENC.encode(topology)


def topology_from_json(data: bytes | str) -> NodeTopology:
    """Decode and validate; raises ``ModelError`` naming the bad field."""
    try:
        return _JSON_DEC.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ModelError(f"invalid topology: {exc}") from None


def topology_to_msgpack(topology: NodeTopology) -> bytes:
    return _MSGPACK_ENC.encode(topology)


def topology_from_msgpack(data: bytes) -> NodeTopology:
    try:
        return _MSGPACK_DEC.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ModelError(f"invalid topology: {exc}") from None


def topology_to_builtins(topology: NodeTopology) -> dict[str, object]:
    out = msgspec.to_builtins(topology)
    assert isinstance(out, dict)
    return out


def topology_from_builtins(data: object) -> NodeTopology:
    try:
        return msgspec.convert(data, NodeTopology)
    except msgspec.ValidationError as exc:
        raise ModelError(f"invalid topology: {exc}") from None


__all__ = [
    "Gpu",
    "GpuFabric",
    "GpuHealth",
    "HealthStatus",
    "Link",
    "LinkKind",
    "MigInstance",
    "MigProfileCapacity",
    "ModelError",
    "Nic",
    "NodeTopology",
    "NumaNode",
    "NvLinkHealth",
    "format_cpulist",
    "gpu_family",
    "parse_cpulist",
    "topology_class",
    "topology_from_builtins",
    "topology_from_json",
    "topology_from_msgpack",
    "topology_to_builtins",
    "topology_to_json",
    "topology_to_msgpack",
    "weakest",
    "worst_link",
]
