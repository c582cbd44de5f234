"""Hardware profiles: whole machines described as data, the input of the fake NVML.

A profile is a YAML mapping (see ``docs/profiles.md``). Built-in profiles live next to this
module in ``profiles/<name>.yaml``; a path to any other YAML file (for instance one written by
``topos profile import``) is accepted wherever a profile name is.

``gpu`` holds defaults applied to every entry of ``gpus``; ``extends: <name>`` starts from
another profile and overrides its keys (``gpu`` is merged key by key, and a ``gpus`` list of the
same length is merged entry by entry).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal

import msgspec
import yaml

from agent.devices.mig_catalog import GEOMETRIES, MigGeometry, geometry_for_product
from common.model import Link, ModelError, parse_cpulist

PROFILE_DIR: Final = Path(__file__).parent / "profiles"
_NAME_RE: Final = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_BUS_RE: Final = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


class ProfileError(ValueError):
    """A profile that cannot be loaded: unknown name, unreadable file or invalid content."""


class ProfileMigInstance(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A GPU instance to create when the fake starts (``compute``: its compute instances)."""

    profile: str  # GPU-instance profile name, "3g.20gb"
    placement: int | None = None  # start slice; None = where the driver would put it
    # compute-instance profile names; None = one compute instance spanning the GPU instance
    compute: list[str] | None = None


class ProfileFabric(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """NVML's GPU fabric info on a multi-node NVLink system (GB200/GB300 NVL72 trays)."""

    cluster_uuid: str  # the NVLink domain's UUID, as GFD prints it in nvidia.com/gpu.clique
    clique_id: int
    state: Literal["not_supported", "not_started", "in_progress", "completed"] = "completed"
    status: int = 0  # the probe's nvmlReturn_t (0: success)
    health_mask: int = 0  # NVML_GPU_FABRIC_HEALTH_MASK_* bits (0: nothing reported)


class ProfileHealth(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What NVML's health calls answer for one GPU (counters since boot; zeros: healthy)."""

    ecc_corrected: int = 0  # volatile ECC counts (aggregate: the same)
    ecc_uncorrected: int = 0
    retired_single_bit: int = 0  # retired pages, by cause
    retired_double_bit: int = 0
    retired_pending: bool = False
    remapped_corrected: int = 0  # row remapping (A100 and later)
    remapped_uncorrected: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    clocks_event_reasons: int = 0  # nvmlClocksEventReason* bits
    # NVLink error counters per port: {port: {crc: n, replay: n, recovery: n}}
    nvlink_errors: dict[int, dict[str, int]] = {}
    nvlinks_down: list[int] = []  # ports that report DISABLED
    fabric: ProfileFabric | None = None  # None: the GPU has no fabric info (NotSupported)


class ProfileGpu(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pci_bus_id: str | None = None  # "00000000:07:00.0"; generated when absent
    uuid: str | None = None  # kept only for the profile's own hostname (see discover_profile)
    product: str | None = None
    memory_mib: int | None = None
    memory_used_mib: int = 0
    compute_capability: str | None = None
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None
    pcie_gen_current: int | None = None
    pcie_width_current: int | None = None
    power_limit_w: float | None = None
    # cpulist syntax; "" = the GPU's CPU set is empty as seen (a container); null = unknown (N/A)
    cpu_affinity: str | None = None
    numa_affinity: str | None = None  # NUMA nodes near the GPU, cpulist syntax, as above
    memory_numa_node: int | None = None  # GPU memory exposed as a NUMA node (Grace Hopper)
    nvlinks: int | None = None  # NVLink ports; default: as many as the link matrix needs
    mig: str | None = None  # MIG geometry key ("a100-40gb"); "auto" = from product; null = none
    mig_enabled: bool = False
    mig_instances: list[ProfileMigInstance] = []
    lost: bool = False  # every NVML query answers GPU_IS_LOST
    health: ProfileHealth = msgspec.field(default_factory=ProfileHealth)


class ProfileNic(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    pci_bus_id: str | None = None
    numa_node: int | None = None


class ProfileNuma(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: int
    cpus: str
    memory_mib: int | None = None


class MatrixSource(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The real ``nvidia-smi topo -m`` output a profile was written from (for conformance)."""

    file: str  # a file name under shared/hw/raw
    # which parts of it the profile reproduces cell for cell
    compare: list[str] = msgspec.field(default_factory=lambda: ["links", "nic_links"])


class Profile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    description: str = ""
    facts: str = ""  # where the facts came from
    hostname: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    cpu_count: int | None = None
    memory_mib: int | None = None
    numa_nodes: list[ProfileNuma] = []
    gpus: list[ProfileGpu] = []
    links: list[str] = []  # rows of the GPU×GPU matrix, cells separated by spaces
    nvswitch: bool = False  # NVLink cells come from NVSwitch ports instead of direct links
    nics: list[ProfileNic] = []
    nic_links: list[str] = []  # one row per GPU, one cell per NIC
    nic_nic_links: list[str] = []  # NIC×NIC rows
    matrix_source: MatrixSource | None = None

    # -- derived views -------------------------------------------------------------------------
    def link_matrix(self) -> list[list[str]]:
        return [row.split() for row in self.links]

    def nic_matrix(self) -> list[list[str]]:
        return [row.split() for row in self.nic_links]

    def nic_nic_matrix(self) -> list[list[str]]:
        return [row.split() for row in self.nic_nic_links]


_YAML_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available


def list_profiles() -> list[str]:
    """Names of the built-in profiles, sorted."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str | Path) -> Profile:
    """A built-in profile by name, or a profile file by path; validated."""
    return _load(str(name_or_path), seen=())


def profile_from_mapping(data: object, *, origin: str = "<data>") -> Profile:
    """Validate an already-parsed mapping (used by the importer and tests)."""
    if not isinstance(data, dict):
        raise ProfileError(f"{origin}: a profile must be a mapping, got {type(data).__name__}")
    try:
        profile = msgspec.convert(_expand_gpu_defaults(data, origin), Profile)
    except msgspec.ValidationError as exc:
        raise ProfileError(f"{origin}: {exc}") from None
    validate_profile(profile, origin=origin)
    return profile


class _Rows(list[str]):
    """Matrix rows: dumped one per line."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(
    _Rows, lambda d, rows: d.represent_sequence("tag:yaml.org,2002:seq", rows, flow_style=False)
)


def profile_to_yaml(profile: Profile) -> str:
    """Serialise a profile as YAML (unset fields left out, matrix rows one per line)."""
    data: dict[str, Any] = msgspec.to_builtins(profile)
    defaults: dict[str, Any] = msgspec.to_builtins(Profile(name=profile.name))
    gpu_defaults: dict[str, Any] = msgspec.to_builtins(ProfileGpu())
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key != "name" and defaults.get(key) == value:
            continue
        if key in ("links", "nic_links", "nic_nic_links"):
            value = _Rows(value)
        elif key == "gpus":
            value = [
                {k: v for k, v in g.items() if gpu_defaults.get(k, object()) != v} for g in value
            ]
        elif key in ("nics", "numa_nodes"):
            value = [{k: v for k, v in item.items() if v is not None} for item in value]
        out[key] = value
    return yaml.dump(out, Dumper=_Dumper, sort_keys=False, width=100, default_flow_style=None)


def _resolve(name_or_path: str) -> Path:
    if _NAME_RE.match(name_or_path) and not name_or_path.endswith((".yaml", ".yml")):
        path = PROFILE_DIR / f"{name_or_path}.yaml"
        if path.is_file():
            return path
        raise ProfileError(
            f"unknown profile {name_or_path!r}; built-in profiles: {', '.join(list_profiles())}"
            " (or give a path to a profile file)"
        )
    path = Path(name_or_path)
    if not path.is_file():
        raise ProfileError(f"profile file {name_or_path!r} does not exist")
    return path


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: cannot read: {exc}") from None
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile must be a YAML mapping")
    return data


def _load(name_or_path: str, *, seen: tuple[str, ...]) -> Profile:
    path = _resolve(name_or_path)
    data = _merged_mapping(path, seen=seen)
    data.setdefault("name", path.stem)
    return profile_from_mapping(data, origin=str(path))


def _merged_mapping(path: Path, *, seen: tuple[str, ...]) -> dict[str, Any]:
    data = _read_mapping(path)
    base_name = data.pop("extends", None)
    if base_name is None:
        return data
    if not isinstance(base_name, str):
        raise ProfileError(f"{path}: 'extends' must name a profile")
    if str(path) in seen:
        raise ProfileError(f"{path}: 'extends' loops back to itself")
    base = _merged_mapping(_resolve(base_name), seen=(*seen, str(path)))
    merged = dict(base)
    for key, value in data.items():
        if key == "gpu" and isinstance(value, dict) and isinstance(base.get("gpu"), dict):
            merged["gpu"] = {**base["gpu"], **value}
        elif (
            key == "gpus"
            and isinstance(value, list)
            and isinstance(base.get("gpus"), list)
            and len(value) == len(base["gpus"])
        ):
            merged["gpus"] = [
                {**b, **v} if isinstance(b, dict) and isinstance(v, dict) else v
                for b, v in zip(base["gpus"], value, strict=True)
            ]
        else:
            merged[key] = value
    return merged


def _expand_gpu_defaults(data: dict[str, Any], origin: str) -> dict[str, Any]:
    out = dict(data)
    defaults = out.pop("gpu", None) or {}
    if not isinstance(defaults, dict):
        raise ProfileError(f"{origin}: 'gpu' (defaults for every GPU) must be a mapping")
    gpus = out.get("gpus", [])
    if isinstance(gpus, int):  # "gpus: 8" = eight GPUs made of the defaults
        gpus = [{} for _ in range(gpus)]
    if not isinstance(gpus, list):
        raise ProfileError(f"{origin}: 'gpus' must be a list (or a count)")
    out["gpus"] = [{**defaults, **g} if isinstance(g, dict) else g for g in gpus]
    return out


_COUNTERS: Final = ("crc", "replay", "recovery")


def _check_health(
    health: ProfileHealth, ports: int, i: int, fail: Callable[[str], ProfileError]
) -> None:
    for port, counts in health.nvlink_errors.items():
        if not 0 <= port < ports:
            raise fail(f"GPU {i} health.nvlink_errors: port {port} is not 0..{ports - 1}")
        for name, value in counts.items():
            if name not in _COUNTERS:
                raise fail(
                    f"GPU {i} health.nvlink_errors[{port}]: unknown counter {name!r}"
                    f" (expected {', '.join(_COUNTERS)})"
                )
            if value < 0:
                raise fail(f"GPU {i} health.nvlink_errors[{port}].{name} = {value}: negative")
    for port in health.nvlinks_down:
        if not 0 <= port < ports:
            raise fail(f"GPU {i} health.nvlinks_down: port {port} is not 0..{ports - 1}")
    counts = msgspec.structs.asdict(health)
    for name, value in counts.items():
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise fail(f"GPU {i} health.{name} = {value}: negative")


def validate_profile(profile: Profile, *, origin: str = "<profile>") -> None:
    """Raise ``ProfileError`` naming the first inconsistency."""

    def fail(msg: str) -> ProfileError:
        return ProfileError(f"{origin}: {msg}")

    if not _NAME_RE.match(profile.name):
        raise fail(f"name {profile.name!r} must be lower-case letters, digits, '.', '_' or '-'")
    n = len(profile.gpus)
    matrix = profile.link_matrix()
    if len(matrix) != n or any(len(row) != n for row in matrix):
        raise fail(f"'links' must be {n} rows of {n} cells for {n} GPUs")
    for i, row in enumerate(matrix):
        for j, cell in enumerate(row):
            try:
                link = Link.parse(cell)
            except ModelError as exc:
                raise fail(f"links row {i}: {exc}") from None
            if (i == j) != (link.kind == "X"):
                raise fail(f"links[{i}][{j}] = {cell!r}: X belongs on the diagonal only")
            if matrix[j][i] != cell:
                raise fail(
                    f"links is not symmetric: [{i}][{j}]={cell} but [{j}][{i}]={matrix[j][i]}"
                )
    for i in range(n):
        nv = {int(c[2:]) for c in matrix[i] if c.startswith("NV")}
        if profile.nvswitch and len(nv) > 1:
            raise fail(f"GPU {i}: NVSwitch profiles need one NV<n> per GPU, found {sorted(nv)}")
        gpu = profile.gpus[i]
        needed = (
            max(nv, default=0)
            if profile.nvswitch
            else sum(int(c[2:]) for c in matrix[i] if c.startswith("NV"))
        )
        if gpu.nvlinks is not None and gpu.nvlinks < needed:
            raise fail(f"GPU {i} has {gpu.nvlinks} NVLinks but the matrix needs {needed}")
        _check_health(gpu.health, gpu.nvlinks if gpu.nvlinks is not None else needed, i, fail)
    if profile.nvswitch:
        _check_switch_cells(matrix, fail)

    k = len(profile.nics)
    if profile.nic_links:
        nm = profile.nic_matrix()
        if len(nm) != n or any(len(r) != k for r in nm):
            raise fail(f"'nic_links' must be {n} rows of {k} cells (GPUs × NICs)")
        for row in nm:
            for cell in row:
                _pcie_cell(cell, fail, "nic_links")
    if profile.nic_nic_links:
        nn = profile.nic_nic_matrix()
        if len(nn) != k or any(len(r) != k for r in nn):
            raise fail(f"'nic_nic_links' must be {k} rows of {k} cells")
        for a, row in enumerate(nn):
            for b, cell in enumerate(row):
                if a == b:
                    if cell != "X":
                        raise fail(f"nic_nic_links[{a}][{a}] must be X")
                    continue
                _pcie_cell(cell, fail, "nic_nic_links")
                if nn[b][a] != cell:
                    raise fail(f"nic_nic_links is not symmetric at [{a}][{b}]")
    names = [nic.name for nic in profile.nics]
    if len(set(names)) != len(names):
        raise fail("NIC names must be unique")
    for nic in profile.nics:
        if not re.match(r"^[A-Za-z0-9_.-]{1,32}$", nic.name):
            raise fail(f"NIC name {nic.name!r} is not a device name")
        if nic.pci_bus_id is not None and not _BUS_RE.match(nic.pci_bus_id):
            raise fail(f"NIC {nic.name}: bad PCI bus id {nic.pci_bus_id!r}")

    bus_ids: set[str] = set()
    for i, gpu in enumerate(profile.gpus):
        where = f"GPU {i}"
        if gpu.pci_bus_id is not None:
            if not _BUS_RE.match(gpu.pci_bus_id):
                raise fail(f"{where}: bad PCI bus id {gpu.pci_bus_id!r}")
            key = gpu.pci_bus_id.lower()[-12:]
            if key in bus_ids:
                raise fail(f"{where}: PCI bus id {gpu.pci_bus_id} is used twice")
            bus_ids.add(key)
        for label, text in (
            ("cpu_affinity", gpu.cpu_affinity),
            ("numa_affinity", gpu.numa_affinity),
        ):
            if text is not None:
                try:
                    parse_cpulist(text)
                except ModelError as exc:
                    raise fail(f"{where}: {label}: {exc}") from None
        for label, value in (
            ("memory_mib", gpu.memory_mib),
            ("memory_used_mib", gpu.memory_used_mib),
            ("nvlinks", gpu.nvlinks),
            ("pcie_gen_max", gpu.pcie_gen_max),
            ("pcie_width_max", gpu.pcie_width_max),
        ):
            if value is not None and value < 0:
                raise fail(f"{where}: {label} must not be negative")
        if gpu.compute_capability is not None and not re.match(
            r"^\d+\.\d+$", gpu.compute_capability
        ):
            raise fail(f"{where}: compute_capability {gpu.compute_capability!r} is not like '8.0'")
        geometry = mig_geometry(gpu)
        if gpu.mig is not None and gpu.mig != "auto" and geometry is None:
            raise fail(f"{where}: unknown MIG geometry {gpu.mig!r}; known: {', '.join(GEOMETRIES)}")
        if (gpu.mig_enabled or gpu.mig_instances) and geometry is None:
            raise fail(f"{where}: MIG instances need a MIG-capable GPU ('mig: <geometry>')")
        if gpu.mig_instances and not gpu.mig_enabled:
            raise fail(f"{where}: MIG instances given but mig_enabled is false")
        if geometry is not None:
            for inst in gpu.mig_instances:
                if geometry.by_name(inst.profile) is None:
                    known = ", ".join(p.name for p in geometry.profiles)
                    raise fail(
                        f"{where}: MIG profile {inst.profile!r} unknown for {geometry.key}"
                        f" ({known})"
                    )

    ids = [node.id for node in profile.numa_nodes]
    if len(set(ids)) != len(ids):
        raise fail("NUMA node ids must be unique")
    for node in profile.numa_nodes:
        if node.id < 0:
            raise fail(f"NUMA node id {node.id} is negative")
        try:
            parse_cpulist(node.cpus)
        except ModelError as exc:
            raise fail(f"NUMA node {node.id}: {exc}") from None
        if node.memory_mib is not None and node.memory_mib < 0:
            raise fail(f"NUMA node {node.id}: memory_mib must not be negative")
    if profile.cpu_count is not None and profile.cpu_count < 0:
        raise fail("cpu_count must not be negative")
    if profile.memory_mib is not None and profile.memory_mib < 0:
        raise fail("memory_mib must not be negative")


def _check_switch_cells(matrix: list[list[str]], fail: Any) -> None:
    """In an NVSwitch profile, two switch-attached GPUs see NV<min(n_i, n_j)>."""
    n = len(matrix)
    links = [max((int(c[2:]) for c in row if c.startswith("NV")), default=0) for row in matrix]
    for i in range(n):
        for j in range(n):
            if i == j or not (links[i] and links[j]):
                continue
            want = f"NV{min(links[i], links[j])}"
            if matrix[i][j] != want:
                raise fail(
                    f"links[{i}][{j}] = {matrix[i][j]}: GPUs {i} and {j} share the NVSwitch fabric,"
                    f" so it must be {want}"
                )


def _pcie_cell(cell: str, fail: Any, where: str) -> None:
    if cell not in ("PIX", "PXB", "PHB", "NODE", "SYS"):
        raise fail(f"{where}: {cell!r} is not one of PIX, PXB, PHB, NODE, SYS")


def mig_geometry(gpu: ProfileGpu) -> MigGeometry | None:
    """The MIG geometry of a profile GPU, or None when it is not MIG-capable."""
    if gpu.mig is None:
        return None
    if gpu.mig == "auto":
        return geometry_for_product(gpu.product, gpu.memory_mib)
    return GEOMETRIES.get(gpu.mig)
