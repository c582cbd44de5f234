"""Parsing ``nvidia-smi topo -m`` text, as printed on a terminal, in a log or pasted on the web.

Accepted: tab- or space-separated columns (also tabs expanded to 8-column stops), the ANSI
underline a TTY gets around the header, NIC columns named ``NIC<n>`` (with a "NIC Legend") or by
device name (``mlx5_0``), any subset of the ``CPU Affinity`` / ``NUMA Affinity`` / ``GPU NUMA ID``
columns, empty affinity cells (containers, Slurm), the extra empty field some drivers print,
trailing spaces and CR line ends, and a Legend section.

Truncated output (a copy cut short) is accepted when every row that is present is whole: the
matrix keeps the GPUs whose rows are present (GPU0…GPUk-1, each with its full row, so its NIC
cells are complete), NIC rows that are missing are filled from the symmetric GPU/NIC cells, and
``notes`` say what was dropped. Anything else is rejected with ``TopoParseError`` naming the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from common.model import ModelError, parse_cpulist

_ANSI: Final = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CELL: Final = re.compile(r"^(X|NV\d{1,3}|PIX|PXB|PHB|NODE|SYS)$")
_GPU: Final = re.compile(r"^GPU(\d+)$")
_DEVICE: Final = re.compile(r"^(GPU\d+|NIC\d+|[A-Za-z][A-Za-z0-9_.-]*\d)$")
_AFFINITY: Final = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_NIC_LEGEND: Final = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


class TopoParseError(ValueError):
    """Input that is not ``nvidia-smi topo -m`` output; the message names the line."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass
class TopoMatrix:
    gpu_count: int  # GPUs kept (rows present)
    header_gpu_count: int  # GPU columns in the header
    nics: list[str]  # NIC names (legend names when there is a legend)
    links: list[list[str]]  # kept GPUs × kept GPUs
    nic_links: list[list[str]]  # kept GPUs × NICs
    nic_nic_links: list[list[str]] | None  # NICs × NICs, None when rows are missing
    full_rows: list[list[str]]  # each kept GPU's cells towards every header GPU
    columns: list[str]  # affinity columns present, in order
    cpu_affinity: list[str | None]  # per kept GPU: cpulist text, "" = empty, None = N/A/absent
    numa_affinity: list[str | None]
    gpu_numa_id: list[int | None]
    notes: list[str] = field(default_factory=list)


def _header_tokens(line: str) -> list[str]:
    words = line.split()
    out: list[str] = []
    i = 0
    while i < len(words):
        for name in _AFFINITY:
            parts = name.split()
            if words[i : i + len(parts)] == parts:
                out.append(name)
                i += len(parts)
                break
        else:
            out.append(words[i])
            i += 1
    return out


def _affinity_fields(
    raw: str, expanded: str, label_and_cells: int, k: int, lineno: int
) -> list[str]:
    """The values of the affinity columns of one row (see the module docstring)."""
    if k == 0:
        return []
    if "\t" in raw:
        parts = raw.split("\t")
        fields = [p.strip() for p in parts[label_and_cells:]]
    else:
        tokens = list(re.finditer(r"\S+", expanded))
        rest = tokens[label_and_cells:]
        fields = []
        pos = (tokens[label_and_cells - 1].end() // 8 + 1) * 8
        for tok in rest:
            while tok.start() >= pos + 8:
                fields.append("")
                pos += 8
            fields.append(tok.group())
            pos = (tok.end() // 8 + 1) * 8
    while len(fields) > k and fields[-1] == "":
        fields.pop()
    while len(fields) > k:
        for idx in range(len(fields) - 2, 0, -1):
            if fields[idx] == "":
                del fields[idx]
                break
        else:
            raise TopoParseError(
                lineno,
                f"{len(fields)} values after the cells but the header has {k} affinity columns",
            )
    return fields + [""] * (k - len(fields))


def parse_topo(text: str) -> TopoMatrix:
    """Parse one ``nvidia-smi topo -m`` output (see the module docstring for what is accepted)."""
    lines = [_ANSI.sub("", line).rstrip("\r") for line in text.split("\n")]
    lineno = 0
    while lineno < len(lines) and not lines[lineno].strip():
        lineno += 1
    if lineno == len(lines):
        raise TopoParseError(1, "empty input: expected the header row of `nvidia-smi topo -m`")
    header_no = lineno + 1
    header = _header_tokens(lines[lineno])
    if not header or header[0] != "GPU0":
        raise TopoParseError(
            header_no,
            "expected the header row (GPU0 GPU1 … CPU Affinity),"
            f" found {lines[lineno].strip()[:60]!r}",
        )
    devices: list[str] = []
    columns: list[str] = []
    for tok in header:
        if tok in _AFFINITY:
            if tok in columns:
                raise TopoParseError(header_no, f"column {tok!r} appears twice")
            columns.append(tok)
        elif columns:
            raise TopoParseError(header_no, f"device column {tok!r} after the affinity columns")
        elif _DEVICE.match(tok):
            if tok in devices:
                raise TopoParseError(header_no, f"column {tok!r} appears twice")
            devices.append(tok)
        else:
            raise TopoParseError(header_no, f"{tok!r} is not a device or affinity column")
    gpus = [d for d in devices if _GPU.match(d)]
    if devices[: len(gpus)] != [f"GPU{i}" for i in range(len(gpus))]:
        raise TopoParseError(header_no, "GPU columns must come first, as GPU0, GPU1, … in order")
    nic_cols = devices[len(gpus) :]
    n_dev = len(devices)

    rows: dict[str, list[str]] = {}
    row_lines: dict[str, int] = {}
    aff: dict[str, list[str]] = {}
    lineno += 1
    while lineno < len(lines):
        raw = lines[lineno]
        number = lineno + 1
        if not raw.strip():
            break
        expanded = raw.expandtabs(8)
        tokens = expanded.split()
        label = tokens[0]
        if label in ("Legend:", "NIC"):
            break
        if label not in devices:
            raise TopoParseError(number, f"row {label!r} is not a column of the header")
        if label in rows:
            raise TopoParseError(number, f"row {label!r} appears twice")
        cells = tokens[1 : 1 + n_dev]
        for pos, cell in enumerate(cells):
            if not _CELL.match(cell):
                raise TopoParseError(
                    number,
                    f"{label} column {devices[pos]}: {cell!r} is not"
                    " X, NV<n>, PIX, PXB, PHB, NODE or SYS",
                )
        if len(cells) < n_dev:
            raise TopoParseError(
                number, f"row {label} has {len(cells)} cells, the header has {n_dev} devices"
            )
        own = devices.index(label)
        if cells[own] != "X":
            raise TopoParseError(
                number, f"row {label} must have X in its own column, found {cells[own]!r}"
            )
        rows[label] = cells
        row_lines[label] = number
        if _GPU.match(label):
            aff[label] = _affinity_fields(raw, expanded, 1 + n_dev, len(columns), number)
        elif len(tokens) > 1 + n_dev:
            raise TopoParseError(number, f"NIC row {label} has values after its {n_dev} cells")
        lineno += 1
    _check_legend(lines, lineno)
    legend = _nic_legend(lines, lineno)

    notes: list[str] = []
    kept = 0
    while f"GPU{kept}" in rows:
        kept += 1
    stray = [g for g in gpus[kept:] if g in rows]
    if stray:
        raise TopoParseError(
            row_lines[stray[0]], f"row {stray[0]} comes without the rows before it"
        )
    if kept == 0:
        raise TopoParseError(header_no + 1, "no GPU rows after the header")
    if kept < len(gpus):
        gone = f"GPU{kept}" if kept == len(gpus) - 1 else f"GPU{kept}…GPU{len(gpus) - 1}"
        notes.append(f"rows {gone} missing (truncated input): keeping GPU0…GPU{kept - 1}")
    missing_nics = [c for c in nic_cols if c not in rows]
    if missing_nics:
        notes.append(
            f"rows {', '.join(missing_nics)} are missing: their cells come from the other rows"
        )

    index = {d: i for i, d in enumerate(devices)}
    for a in rows:
        for b in rows:
            if rows[a][index[b]] != rows[b][index[a]]:
                later = a if row_lines[a] > row_lines[b] else b
                raise TopoParseError(
                    row_lines[later],
                    f"{a}/{b} is {rows[a][index[b]]} but {b}/{a} is {rows[b][index[a]]}:"
                    " not symmetric",
                )
    kept_gpus = [f"GPU{i}" for i in range(kept)]
    links = [[rows[g][index[h]] for h in kept_gpus] for g in kept_gpus]
    nic_links = [[rows[g][index[c]] for c in nic_cols] for g in kept_gpus]
    nic_nic: list[list[str]] | None = []
    for a in nic_cols:
        row: list[str] = []
        for b in nic_cols:
            if a in rows:
                row.append(rows[a][index[b]])
            elif b in rows:
                row.append(rows[b][index[a]])
            elif a == b:
                row.append("X")
            else:
                nic_nic = None
                break
        if nic_nic is None:
            notes.append("NIC-to-NIC cells are incomplete: left out")
            break
        nic_nic.append(row)
    for label in kept_gpus:
        for name, cell in zip(devices, rows[label], strict=True):
            if name.startswith("GPU") and name not in kept_gpus and cell == "X":
                raise TopoParseError(row_lines[label], f"row {label} has X in column {name}")

    cpu: list[str | None] = []
    numa: list[str | None] = []
    gpu_numa: list[int | None] = []
    for label in kept_gpus:
        values = dict(zip(columns, aff[label], strict=True))
        number = row_lines[label]
        cpu.append(_cpulist(values.get("CPU Affinity"), number, "CPU Affinity"))
        numa.append(_cpulist(values.get("NUMA Affinity"), number, "NUMA Affinity"))
        raw_id = values.get("GPU NUMA ID")
        if raw_id in (None, "", "N/A"):
            gpu_numa.append(None)
        elif raw_id is not None and raw_id.isdigit():
            gpu_numa.append(int(raw_id))
        else:
            raise TopoParseError(number, f"GPU NUMA ID {raw_id!r} is not a number or N/A")
    nic_names = [legend.get(c, c) for c in nic_cols]
    if len(set(nic_names)) != len(nic_names):
        raise TopoParseError(header_no, "two NIC columns have the same name")
    return TopoMatrix(
        gpu_count=kept,
        header_gpu_count=len(gpus),
        nics=nic_names,
        links=links,
        nic_links=nic_links,
        nic_nic_links=nic_nic,
        full_rows=[[rows[g][index[h]] for h in gpus] for g in kept_gpus],
        columns=columns,
        cpu_affinity=cpu,
        numa_affinity=numa,
        gpu_numa_id=gpu_numa,
        notes=notes,
    )


def _cpulist(value: str | None, number: int, column: str) -> str | None:
    if value is None or value == "N/A":
        return None
    try:
        parse_cpulist(value)
    except ModelError:
        raise TopoParseError(number, f"{column} {value!r} is not a CPU/NUMA list") from None
    return value


def _check_legend(lines: list[str], start: int) -> None:
    """After the rows: blank lines, ``Legend:``, ``X = …`` definitions, ``NIC Legend:`` entries."""
    for i in range(start, len(lines)):
        text = lines[i].strip()
        if not text or text in ("Legend:", "NIC Legend:") or "=" in text or _NIC_LEGEND.match(text):
            continue
        raise TopoParseError(i + 1, f"unexpected text after the matrix: {text[:60]!r}")


def _nic_legend(lines: list[str], start: int) -> dict[str, str]:
    out: dict[str, str] = {}
    for i in range(start, len(lines)):
        m = _NIC_LEGEND.match(lines[i])
        if m:
            out[m.group(1)] = m.group(2)
    return out
