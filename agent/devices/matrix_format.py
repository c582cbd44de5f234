"""Printing a topology: the ``nvidia-smi topo -m`` layout and a readable inventory table."""

from __future__ import annotations

from common.model import NodeTopology, format_cpulist, topology_class

_LEGEND = """Legend:

  X    = Self
  SYS  = PCIe path that also crosses the link between NUMA nodes (QPI/UPI/xGMI)
  NODE = PCIe path that also crosses host bridges inside one NUMA node
  PHB  = PCIe path through a PCIe host bridge (the CPU)
  PXB  = PCIe path through several PCIe bridges, no host bridge
  PIX  = PCIe path through at most one PCIe bridge
  NV#  = a bonded set of # NVLinks
"""


def _cell(text: str) -> str:
    return " X " if text == "X" else text


def format_topo_matrix(topology: NodeTopology) -> str:
    """The GPU/NIC matrix with affinity columns and legends, tab-separated like nvidia-smi."""
    n = len(topology.gpus)
    k = len(topology.nics)
    nic_labels = [f"NIC{i}" for i in range(k)]
    header = ["", *[f"GPU{i}" for i in range(n)], *nic_labels]
    header += ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    lines = ["\t".join(header)]
    for i, gpu in enumerate(topology.gpus):
        cells = [_cell(c) for c in topology.links[i]]
        if k:
            row = topology.nic_links[i] if topology.nic_links else ("SYS",) * k
            cells += list(row)
        cpu = "N/A" if gpu.cpu_affinity is None else format_cpulist(gpu.cpu_affinity)
        if gpu.numa_affinity is not None:
            numa = format_cpulist(gpu.numa_affinity)
        else:
            numa = "N/A" if gpu.numa_node is None else str(gpu.numa_node)
        gpu_numa = "N/A" if gpu.memory_numa_node is None else str(gpu.memory_numa_node)
        # nvidia-smi leaves an empty field between NUMA Affinity and GPU NUMA ID.
        lines.append("\t".join([f"GPU{i}", *cells, cpu, numa, "", gpu_numa]))
    for a in range(k):
        cells = [topology.nic_links[i][a] if topology.nic_links else "SYS" for i in range(n)]
        if topology.nic_nic_links:
            cells += [_cell(c) for c in topology.nic_nic_links[a]]
        else:
            cells += [" X " if a == b else "SYS" for b in range(k)]
        lines.append("\t".join([nic_labels[a], *cells]))
    out = "\n".join(lines) + "\n\n" + _LEGEND
    if k:
        out += "\nNIC Legend:\n\n"
        out += "".join(
            f"  {label}: {nic.name}\n" for label, nic in zip(nic_labels, topology.nics, strict=True)
        )
    return out


def _opt(value: int | None) -> str:
    return "?" if value is None else str(value)


def _gib(mib: int | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.0f} GiB"


def format_inventory(topology: NodeTopology) -> str:
    """A readable summary: node facts, one line per GPU, MIG instances, NICs and NUMA nodes."""
    t = topology
    out = [
        f"node {t.hostname}  ({t.source})",
        f"  driver {t.driver_version or '?'}  CUDA {t.cuda_version or '?'}  "
        f"CPUs {t.cpu_count if t.cpu_count is not None else '?'}  memory {_gib(t.memory_mib)}  "
        f"NUMA nodes {len(t.numa_nodes)}  GPU topology {topology_class(t)}",
        "",
    ]
    rows = [["GPU", "PRODUCT", "MEMORY", "CC", "PCI BUS", "NUMA", "PCIe", "POWER", "MIG", "HEALTH"]]
    for g in t.gpus:
        pcie = "?"
        if g.pcie_gen_current is not None or g.pcie_gen_max is not None:
            pcie = f"gen{g.pcie_gen_current or '?'}x{g.pcie_width_current or '?'}"
        mig = (
            "n/a"
            if g.mig_capable is False
            else "?"
            if g.mig_enabled is None
            else (f"on ({len(g.mig_instances)})" if g.mig_enabled else "off")
        )
        rows.append(
            [
                str(g.index),
                g.product or "?",
                "?" if g.memory_total_mib is None else f"{g.memory_total_mib} MiB",
                g.compute_capability or "?",
                g.pci_bus_id or "?",
                "?" if g.numa_node is None else str(g.numa_node),
                pcie,
                "?" if g.power_limit_w is None else f"{g.power_limit_w:.0f} W",
                mig,
                "ok" if g.healthy else f"UNHEALTHY: {g.health_reason or 'unknown'}",
            ]
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    out += [
        "  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]
    for g in t.gpus:
        if g.mig_instances:
            out.append("")
            out.append(f"  GPU {g.index} MIG instances:")
            for m in g.mig_instances:
                ci = "-" if m.ci_id is None else str(m.ci_id)
                out.append(
                    f"    {m.profile:<14} GI {m.gi_id:<2} CI {ci:<2} placement {m.placement_start}:"
                    f"{m.placement_size}  {m.memory_mib} MiB  {m.uuid or ''}".rstrip()
                )
        if g.mig_enabled and g.mig_creatable:
            free = ", ".join(f"{c.profile} {c.free}/{c.total}" for c in g.mig_creatable)
            out.append(f"    still creatable: {free}")
    if t.nics:
        out.append("")
        out.append(
            "  NICs: "
            + ", ".join(
                f"{nic.name} ({nic.pci_bus_id or '?'}, NUMA {_opt(nic.numa_node)})"
                for nic in t.nics
            )
        )
    if t.numa_nodes:
        out.append("")
        for node in t.numa_nodes:
            out.append(
                f"  NUMA {node.id}: CPUs {format_cpulist(node.cpus) or '-'}"
                f"  memory {_gib(node.memory_mib)}"
            )
    return "\n".join(out) + "\n"
