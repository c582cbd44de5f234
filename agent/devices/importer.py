"""``topos profile import``: real ``nvidia-smi`` output → a hardware profile.

Inputs: ``nvidia-smi topo -m`` (required; see ``topo_text`` for what is accepted), optionally
``nvidia-smi -q`` (text or ``-x`` XML) for products, UUIDs, bus ids, memory, PCIe, power and
driver, and ``nvidia-smi mig -lgip`` / ``-lgi`` tables for MIG. Errors name the file and line.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from agent.devices.mig_catalog import geometry_for_names
from agent.devices.profile import Profile, ProfileError, profile_from_mapping
from agent.devices.topo_text import TopoMatrix, TopoParseError, parse_topo
from common.model import format_cpulist, parse_cpulist

# Compute capability by product family (nvidia-smi -q does not print it).
_COMPUTE_CAPABILITY: Final = (
    ("GH200", "9.0"),
    ("H200", "9.0"),
    ("H100", "9.0"),
    ("H800", "9.0"),
    ("L40", "8.9"),
    ("L4", "8.9"),
    ("RTX 4090", "8.9"),
    ("RTX 6000 ADA", "8.9"),
    ("A100", "8.0"),
    ("A800", "8.0"),
    ("A30", "8.0"),
    ("A40", "8.6"),
    ("A10", "8.6"),
    ("RTX A6000", "8.6"),
    ("RTX 3090", "8.6"),
    ("T4", "7.5"),
    ("V100", "7.0"),
    ("P100", "6.0"),
)
_NVLINK_SWITCH_THRESHOLD: Final = 18  # more NVLinks than a GPU has ports → NVSwitch fabric


class ImportError_(ValueError):
    """Input the importer cannot use; the message names the file and line."""


def compute_capability_for(product: str | None) -> str | None:
    if not product:
        return None
    up = product.upper()
    for key, cc in _COMPUTE_CAPABILITY:
        if key in up:
            return cc
    return None


@dataclass
class QueryGpu:
    bus_id: str | None = None
    product: str | None = None
    uuid: str | None = None
    memory_mib: int | None = None
    pcie_gen_max: int | None = None
    pcie_gen_current: int | None = None
    pcie_width_max: int | None = None
    pcie_width_current: int | None = None
    power_limit_w: float | None = None
    mig_enabled: bool | None = None
    fabric: bool = False  # an NVSwitch fabric state other than N/A


@dataclass
class Query:
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[QueryGpu] = field(default_factory=list)


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    m = re.search(r"[-+]?\d+(?:\.\d+)?", text)
    return float(m.group()) if m else None


def parse_query(text: str, *, origin: str = "<query>") -> Query:
    """``nvidia-smi -q`` as text, or ``nvidia-smi -q -x`` as XML."""
    if text.lstrip().startswith("<"):
        return _parse_query_xml(text, origin)
    return _parse_query_text(text, origin)


def _parse_query_text(text: str, origin: str) -> Query:
    q = Query()
    gpu: QueryGpu | None = None
    stack: list[tuple[int, str]] = []
    saw_log = False
    for _number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if "NVSMI LOG" in line:
            saw_log = True
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, value = line.strip().partition(":")
        key, value = key.strip(), value.strip()
        m = re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$", line.strip())
        if m and indent == 0:
            gpu = QueryGpu(bus_id=m.group(1))
            q.gpus.append(gpu)
            stack = []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not sep:
            stack.append((indent, key))
            continue
        if not value and not sep:
            continue
        section = [s for _, s in stack]
        if gpu is None:
            if key == "Driver Version":
                q.driver_version = value
            elif key == "CUDA Version":
                q.cuda_version = value
            elif indent == 0 and key not in ("Timestamp", "Attached GPUs", "HIC Info"):
                continue
            continue
        if key == "Product Name":
            gpu.product = value
        elif key == "GPU UUID":
            gpu.uuid = value
        elif key == "Bus Id" and section[-1:] == ["PCI"]:
            gpu.bus_id = value
        elif key == "Total" and section[-1:] == ["FB Memory Usage"]:
            mem = _num(value)
            gpu.memory_mib = None if mem is None else int(mem)
        elif section[-1:] == ["PCIe Generation"] and key in ("Max", "Current"):
            v = _num(value)
            if v is not None:
                if key == "Max":
                    gpu.pcie_gen_max = int(v)
                else:
                    gpu.pcie_gen_current = int(v)
        elif section[-1:] == ["Link Width"] and key in ("Max", "Current"):
            v = _num(value)
            if v is not None:
                if key == "Max":
                    gpu.pcie_width_max = int(v)
                else:
                    gpu.pcie_width_current = int(v)
        elif key in ("Current Power Limit", "Power Limit") and section[-1:] in (
            ["GPU Power Readings"],
            ["Power Readings"],
        ):
            gpu.power_limit_w = _num(value)
        elif key == "Current" and section[-1:] == ["MIG Mode"]:
            gpu.mig_enabled = value == "Enabled" if value in ("Enabled", "Disabled") else None
        elif key == "State" and section[-1:] == ["Fabric"]:
            gpu.fabric = value not in ("N/A", "")
    if not saw_log and not q.gpus:
        raise ImportError_(
            f"{origin}: line 1: not `nvidia-smi -q` output (no NVSMI LOG, no GPU sections)"
        )
    return q


def _parse_query_xml(text: str, origin: str) -> Query:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line = exc.position[0] if exc.position else 1
        raise ImportError_(f"{origin}: line {line}: not valid XML ({exc})") from None
    if root.tag != "nvidia_smi_log":
        raise ImportError_(f"{origin}: line 1: XML root is <{root.tag}>, expected <nvidia_smi_log>")

    def get(node: ET.Element, path: str) -> str | None:
        found = node.find(path)
        return None if found is None or found.text is None else found.text.strip()

    q = Query(driver_version=get(root, "driver_version"), cuda_version=get(root, "cuda_version"))
    for g in root.findall("gpu"):
        gen_max = _num(get(g, "pci/pci_gpu_link_info/pcie_gen/max_link_gen"))
        gen_cur = _num(get(g, "pci/pci_gpu_link_info/pcie_gen/current_link_gen"))
        w_max = _num(get(g, "pci/pci_gpu_link_info/link_widths/max_link_width"))
        w_cur = _num(get(g, "pci/pci_gpu_link_info/link_widths/current_link_width"))
        mem = _num(get(g, "fb_memory_usage/total"))
        power = _num(
            get(g, "gpu_power_readings/current_power_limit") or get(g, "power_readings/power_limit")
        )
        mig = get(g, "mig_mode/current_mig")
        fabric = get(g, "fabric/state")
        q.gpus.append(
            QueryGpu(
                bus_id=get(g, "pci/pci_bus_id") or g.get("id"),
                product=get(g, "product_name"),
                uuid=get(g, "uuid"),
                memory_mib=None if mem is None else int(mem),
                pcie_gen_max=None if gen_max is None else int(gen_max),
                pcie_gen_current=None if gen_cur is None else int(gen_cur),
                pcie_width_max=None if w_max is None else int(w_max),
                pcie_width_current=None if w_cur is None else int(w_cur),
                power_limit_w=power,
                mig_enabled=None if mig not in ("Enabled", "Disabled") else mig == "Enabled",
                fabric=fabric not in (None, "N/A", ""),
            )
        )
    return q


@dataclass
class MigTables:
    profiles: dict[int, list[str]] = field(default_factory=dict)  # GPU → -lgip profile names
    instances: dict[int, list[tuple[str, int]]] = field(default_factory=dict)  # GPU → (name, start)


_LGIP_ROW: Final = re.compile(
    r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s+(Yes|No)\s+\d+\s+\d+\s+\d+\s*\|$"
)
_LGI_ROW: Final = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|$")
_CONT_ROW: Final = re.compile(r"^\|[\s\d]*\|$")


def parse_mig_tables(text: str, *, origin: str = "<mig>") -> MigTables:
    """Rows of ``nvidia-smi mig -lgip`` (profiles) and ``-lgi`` (instances with placements)."""
    out = MigTables()
    rows = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or set(line) <= set("+-=|") or not line.startswith("|"):
            if line and not line.startswith(("+", "|")):
                raise ImportError_(
                    f"{origin}: line {number}: not a `nvidia-smi mig` table: {line[:60]!r}"
                )
            continue
        if m := _LGIP_ROW.match(line):
            out.profiles.setdefault(int(m.group(1)), []).append(m.group(2))
            rows += 1
        elif m := _LGI_ROW.match(line):
            out.instances.setdefault(int(m.group(1)), []).append((m.group(2), int(m.group(5))))
            rows += 1
        elif _CONT_ROW.match(line) or re.search(r"[A-Za-z]", line):
            continue  # second line of a -lgip row, or a header line
        else:
            raise ImportError_(f"{origin}: line {number}: unrecognised MIG table row {line[:60]!r}")
    if rows == 0:
        raise ImportError_(f"{origin}: no `nvidia-smi mig -lgip` or `-lgi` rows found")
    return out


def _is_nvswitch(matrix: TopoMatrix) -> bool:
    """NVLink cells that add up to more ports than a GPU has can only be an NVSwitch fabric."""
    for row in matrix.full_rows:
        counts = [int(c[2:]) for c in row if c.startswith("NV")]
        if len(set(counts)) == 1 and sum(counts) > _NVLINK_SWITCH_THRESHOLD:
            return True
    return False


def build_profile(
    matrix: TopoMatrix,
    *,
    name: str,
    source_file: str | None = None,
    query: Query | None = None,
    mig: MigTables | None = None,
    hostname: str | None = None,
) -> Profile:
    n = matrix.gpu_count
    gpus: list[dict[str, Any]] = []
    for i in range(n):
        gpus.append(
            {
                "cpu_affinity": matrix.cpu_affinity[i],
                "numa_affinity": matrix.numa_affinity[i],
                "memory_numa_node": matrix.gpu_numa_id[i],
            }
        )
    data: dict[str, Any] = {
        "name": name,
        "description": f"imported from {source_file or 'nvidia-smi topo -m'}",
    }
    if hostname:
        data["hostname"] = hostname
    if query is not None:
        if query.gpus and len(query.gpus) < n:
            raise ImportError_(
                f"--query lists {len(query.gpus)} GPUs but the matrix has {n};"
                " give the outputs of one machine"
            )
        data["driver_version"] = query.driver_version
        data["cuda_version"] = query.cuda_version
        for entry, qg in zip(gpus, query.gpus, strict=False):
            entry.update(
                pci_bus_id=qg.bus_id,
                uuid=qg.uuid,
                product=qg.product,
                memory_mib=qg.memory_mib,
                compute_capability=compute_capability_for(qg.product),
                pcie_gen_max=qg.pcie_gen_max,
                pcie_gen_current=qg.pcie_gen_current,
                pcie_width_max=qg.pcie_width_max,
                pcie_width_current=qg.pcie_width_current,
                power_limit_w=qg.power_limit_w,
            )
            if qg.mig_enabled is not None and compute_capability_for(qg.product) in ("8.0", "9.0"):
                entry["mig"] = "auto"
                entry["mig_enabled"] = qg.mig_enabled
    if mig is not None:
        for index, names in sorted(mig.profiles.items()):
            if index >= n:
                raise ImportError_(f"--mig names GPU {index} but the matrix has {n} GPUs")
            geometry = geometry_for_names(names)
            if geometry is None:
                raise ImportError_(
                    f"--mig: GPU {index} profiles ({', '.join(names)}) match no known MIG geometry"
                )
            gpus[index]["mig"] = geometry.key
            gpus[index]["mig_enabled"] = True
        for index, insts in sorted(mig.instances.items()):
            if index >= n:
                raise ImportError_(f"--mig names GPU {index} but the matrix has {n} GPUs")
            if "mig" not in gpus[index] or gpus[index].get("mig") == "auto":
                geometry = geometry_for_names(p for p, _ in insts)
                if geometry is None:
                    raise ImportError_(f"--mig: GPU {index} instances match no known MIG geometry")
                gpus[index]["mig"] = geometry.key
            gpus[index]["mig_enabled"] = True
            gpus[index]["mig_instances"] = [
                {"profile": p, "placement": start, "compute": []} for p, start in insts
            ]
    data["gpus"] = gpus
    data["links"] = [" ".join(row) for row in matrix.links]
    data["nics"] = [{"name": nic} for nic in matrix.nics]
    if matrix.nics:
        data["nic_links"] = [" ".join(row) for row in matrix.nic_links]
        if matrix.nic_nic_links is not None:
            data["nic_nic_links"] = [" ".join(row) for row in matrix.nic_nic_links]
    numa_cpus: dict[int, set[int]] = {}
    all_cpus: set[int] = set()
    for i in range(n):
        cpus = set(parse_cpulist(matrix.cpu_affinity[i] or ""))
        all_cpus |= cpus
        nodes = parse_cpulist(matrix.numa_affinity[i] or "")
        if nodes:
            numa_cpus.setdefault(nodes[0], set()).update(cpus)
    if numa_cpus:
        taken: set[int] = set()
        numa_nodes: list[dict[str, Any]] = []
        for node, node_cpus in sorted(numa_cpus.items()):
            own = node_cpus - taken
            taken |= own
            numa_nodes.append({"id": node, "cpus": format_cpulist(own)})
        data["numa_nodes"] = numa_nodes
    if all_cpus:
        data["cpu_count"] = max(all_cpus) + 1
    if source_file is not None:
        compare = ["links", "nic_links"] + [
            c
            for c, col in (
                ("cpu_affinity", "CPU Affinity"),
                ("numa_affinity", "NUMA Affinity"),
                ("gpu_numa_id", "GPU NUMA ID"),
            )
            if col in matrix.columns
        ]
        data["matrix_source"] = {"file": source_file, "compare": compare}
    data["nvswitch"] = _is_nvswitch(matrix) or any(g.fabric for g in (query.gpus if query else []))
    try:
        return profile_from_mapping(data, origin=name)
    except ProfileError:
        if not data["nvswitch"]:
            raise
        data["nvswitch"] = False  # a partitioned fabric: describe its links as direct ones
        return profile_from_mapping(data, origin=name)


def import_files(
    *,
    topo: Path,
    query: Path | None = None,
    mig: Path | None = None,
    name: str | None = None,
) -> tuple[Profile, list[str]]:
    """Read the files and build the profile; returns it with notes about truncated input."""

    def read(path: Path) -> str:
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ImportError_(f"{path}: cannot read: {exc.strerror or exc}") from None

    try:
        matrix = parse_topo(read(topo))
    except TopoParseError as exc:
        raise ImportError_(f"{topo}: {exc}") from None
    q = None if query is None else parse_query(read(query), origin=str(query))
    m = None if mig is None else parse_mig_tables(read(mig), origin=str(mig))
    profile_name = (
        name or re.sub(r"[^a-z0-9._-]+", "-", topo.stem.lower()).strip("-.")[:63] or "imported"
    )
    profile = build_profile(matrix, name=profile_name, source_file=topo.name, query=q, mig=m)
    return profile, matrix.notes
