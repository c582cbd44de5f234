"""Workload traces: one job per row, read from CSV or JSON Lines (format in ``docs/simulate.md``).

A job is ``gang_size`` identical pods that start together (all or nothing) and run for
``duration_s`` seconds once placed (longer when the placement is poor: see :mod:`.costmodel`).

Columns / keys (only ``job_id``, ``arrival_s`` and ``duration_s`` are required):

=============  ==========================================================================
job_id         unique name (letters, digits, ``-``, ``.``, ``_``)
arrival_s      submission time, seconds from the start of the trace (≥ 0)
duration_s     run time on an ideal placement, seconds (> 0)
gpus           whole GPUs per pod (default 1); with ``mig_profile``: MIG instances per pod
gpu_type       GPU model the job needs, e.g. ``H100`` (matched inside the product name); empty: any
gang_size      pods of the job (default 1); more than 1 makes an all-or-nothing gang
priority       integer, higher first (default 0)
mig_profile    MIG profile per instance, e.g. ``1g.5gb`` (default: none, whole GPUs)
cpu            CPU cores per pod (default 8 per GPU, 2 for MIG and CPU-only pods)
memory_gib     memory per pod in GiB (default 64 per GPU, 16 for MIG and CPU-only pods)
numa_policy    ``best-effort`` | ``restricted`` | ``single-numa`` | ``isolated`` (default none)
gpu_fraction   part of one GPU per pod, 0 < f ≤ 1: the pods ask ``topos.io/gpu-fraction`` and no
               ``nvidia.com/gpu`` (docs/sharing.md); ``gpus`` must then be 1 (default none)
=============  ==========================================================================
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from common.podkeys import NUMA_POLICY_VALUES

__all__ = ["COLUMNS", "Job", "TraceError", "dump_csv", "dump_jsonl", "parse_trace"]

COLUMNS: Final = (
    "job_id",
    "arrival_s",
    "duration_s",
    "gpus",
    "gpu_type",
    "gang_size",
    "priority",
    "mig_profile",
    "cpu",
    "memory_gib",
    "numa_policy",
    "gpu_fraction",
)
_REQUIRED: Final = ("job_id", "arrival_s", "duration_s")
_ID_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_MIG_RE: Final = re.compile(r"^\d+(c\.\d+)?g\.\d+gb$")
_TYPE_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,62}$")
MAX_GPUS_PER_POD: Final = 64
MAX_GANG: Final = 10_000


class TraceError(ValueError):
    """A trace that cannot be replayed; the message names the file, line and field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    job_id: str
    arrival_s: float
    duration_s: float
    gpus: int = 1
    gpu_type: str = ""
    gang_size: int = 1
    priority: int = 0
    mig_profile: str = ""
    cpu: float | None = None
    memory_gib: float | None = None
    numa_policy: str = ""
    gpu_fraction: float | None = None

    @property
    def cpu_per_pod(self) -> float:
        if self.cpu is not None:
            return self.cpu
        return 8.0 * self.gpus if self.gpus and not self.mig_profile else 2.0

    @property
    def memory_gib_per_pod(self) -> float:
        if self.memory_gib is not None:
            return self.memory_gib
        return 64.0 * self.gpus if self.gpus and not self.mig_profile else 16.0

    @property
    def whole_gpus(self) -> int:
        """Whole GPUs per pod (0 for MIG, shared and CPU-only pods)."""
        return 0 if self.mig_profile or self.gpu_fraction is not None else self.gpus

    @property
    def gpu_milli(self) -> int:
        """GPU asked per pod, in thousandths of a GPU (a share's part, or 1,000 per whole GPU;
        0 for MIG and CPU-only pods)."""
        if self.gpu_fraction is not None:
            return round(self.gpu_fraction * 1000)
        return 1000 * self.whole_gpus

    @property
    def kind(self) -> str:
        """``gang`` | ``multi-gpu`` | ``single-gpu`` | ``mig`` | ``cpu`` (for reports)."""
        if self.gang_size > 1:
            return "gang"
        if self.mig_profile:
            return "mig"
        if self.gpus > 1:
            return "multi-gpu"
        return "single-gpu" if self.gpus == 1 else "cpu"

    def row(self) -> dict[str, object]:
        """The job as a trace row (defaults left empty)."""
        return {
            "job_id": self.job_id,
            "arrival_s": _num(self.arrival_s),
            "duration_s": _num(self.duration_s),
            "gpus": self.gpus,
            "gpu_type": self.gpu_type,
            "gang_size": self.gang_size,
            "priority": self.priority,
            "mig_profile": self.mig_profile,
            "cpu": "" if self.cpu is None else _num(self.cpu),
            "memory_gib": "" if self.memory_gib is None else _num(self.memory_gib),
            "numa_policy": self.numa_policy,
            "gpu_fraction": "" if self.gpu_fraction is None else self.gpu_fraction,
        }


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 6)


class _Row:
    """One row being read, with its position for error messages."""

    def __init__(self, where: str, values: Mapping[str, object]) -> None:
        self.where = where
        self.values = values

    def fail(self, key: str, message: str) -> TraceError:
        return TraceError(f"{self.where}: {key} {message}")

    def text(self, key: str) -> str:
        raw = self.values.get(key)
        if raw is None:
            return ""
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise self.fail(key, f"must be a string or number, not {type(raw).__name__}")
        return str(raw).strip()

    def number(self, key: str, *, default: float | None = None, minimum: float = 0.0) -> float:
        text = self.text(key)
        if not text:
            if default is None:
                raise self.fail(key, "is required")
            return default
        try:
            value = float(text)
        except ValueError:
            raise self.fail(key, f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < minimum:
            raise self.fail(key, f"{text!r} must be a finite number ≥ {minimum:g}")
        return value

    def integer(self, key: str, *, default: int, minimum: int, maximum: int) -> int:
        text = self.text(key)
        if not text:
            return default
        try:
            value = int(text) if "." not in text else int(float(text))
            if "." in text and not float(text).is_integer():
                raise ValueError
        except ValueError:
            raise self.fail(key, f"{text!r} is not a whole number") from None
        if not minimum <= value <= maximum:
            raise self.fail(key, f"{value} is out of range ({minimum}–{maximum})")
        return value


def _job(row: _Row) -> Job:
    unknown = sorted(k for k in row.values if k not in COLUMNS and k)
    if unknown:
        raise TraceError(
            f"{row.where}: unknown column {unknown[0]!r}; known columns: {', '.join(COLUMNS)}"
        )
    job_id = row.text("job_id")
    if not job_id:
        raise row.fail("job_id", "is required")
    if not _ID_RE.match(job_id):
        raise row.fail("job_id", f"{job_id!r} must be 1–63 letters, digits, '-', '.' or '_'")
    duration = row.number("duration_s")
    if duration <= 0:
        raise row.fail("duration_s", f"{duration:g} must be positive")
    mig = row.text("mig_profile")
    if mig and not _MIG_RE.match(mig):
        raise row.fail("mig_profile", f"{mig!r} is not a MIG profile such as 1g.5gb or 3g.40gb")
    gpu_type = row.text("gpu_type")
    if gpu_type and not _TYPE_RE.match(gpu_type):
        raise row.fail("gpu_type", f"{gpu_type!r} is not a GPU model name such as H100")
    numa = row.text("numa_policy")
    if numa and numa not in NUMA_POLICY_VALUES:
        raise row.fail("numa_policy", f"{numa!r} must be one of {', '.join(NUMA_POLICY_VALUES)}")
    gpus = row.integer("gpus", default=1, minimum=0, maximum=MAX_GPUS_PER_POD)
    if mig and gpus == 0:
        raise row.fail("gpus", "must be at least 1 with mig_profile (it counts MIG instances)")
    fraction: float | None = None
    if row.text("gpu_fraction"):
        fraction = row.number("gpu_fraction")
        if not 0 < fraction <= 1:
            raise row.fail("gpu_fraction", f"{fraction:g} must be in (0, 1]: part of one GPU")
        if mig:
            raise row.fail("gpu_fraction", "and mig_profile exclude each other (MIG is not shared)")
        if gpus != 1:
            raise row.fail("gpus", f"{gpus} must be 1 with gpu_fraction (a share of one GPU)")
    cpu_text, mem_text = row.text("cpu"), row.text("memory_gib")
    return Job(
        job_id=job_id,
        arrival_s=row.number("arrival_s"),
        duration_s=duration,
        gpus=gpus,
        gpu_type=gpu_type,
        gang_size=row.integer("gang_size", default=1, minimum=1, maximum=MAX_GANG),
        priority=row.integer("priority", default=0, minimum=-(2**31), maximum=2**31 - 1),
        mig_profile=mig,
        cpu=row.number("cpu") if cpu_text else None,
        memory_gib=row.number("memory_gib") if mem_text else None,
        numa_policy=numa,
        gpu_fraction=fraction,
    )


def _rows_csv(text: str, name: str) -> Iterable[_Row]:
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None:
        return
    header = [h.strip() for h in reader.fieldnames]
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        raise TraceError(f"{name}: the header lacks column {missing[0]!r} (line 1)")
    reader.fieldnames = header
    for values in reader:
        where = f"{name} line {reader.line_num}"
        if None in values:
            raise TraceError(f"{where}: more fields than the header names")
        if not any((v or "").strip() for v in values.values()):
            continue  # blank line
        yield _Row(where, {k: v for k, v in values.items() if v is not None})


def _rows_jsonl(text: str, name: str) -> Iterable[_Row]:
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{name} line {number}"
        try:
            values = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(values, dict):
            raise TraceError(f"{where}: expected a JSON object, got {type(values).__name__}")
        yield _Row(where, values)


def parse_trace(text: str, *, name: str = "trace", fmt: str | None = None) -> list[Job]:
    """Jobs of a trace, sorted by arrival (stable). ``fmt``: ``csv`` or ``jsonl`` (default:
    from ``name``'s extension; JSON Lines when the first non-blank character is ``{``)."""
    if fmt is None:
        lower = name.lower()
        if lower.endswith((".jsonl", ".ndjson", ".json")):
            fmt = "jsonl"
        elif lower.endswith(".csv"):
            fmt = "csv"
        else:
            fmt = "jsonl" if text.lstrip().startswith("{") else "csv"
    if fmt not in ("csv", "jsonl"):
        raise TraceError(f"{name}: unknown trace format {fmt!r} (csv or jsonl)")
    rows = _rows_csv(text, name) if fmt == "csv" else _rows_jsonl(text, name)
    jobs: list[Job] = []
    seen: dict[str, str] = {}
    for row in rows:
        job = _job(row)
        if job.job_id in seen:
            raise TraceError(
                f"{row.where}: job_id {job.job_id!r} already used ({seen[job.job_id]})"
            )
        seen[job.job_id] = row.where
        jobs.append(job)
    if not jobs:
        raise TraceError(f"{name}: the trace has no jobs")
    jobs.sort(key=lambda j: j.arrival_s)
    return jobs


def dump_csv(jobs: Sequence[Job]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for job in jobs:
        writer.writerow(job.row())
    return out.getvalue()


def dump_jsonl(jobs: Sequence[Job]) -> str:
    lines = []
    for job in jobs:
        row = {k: v for k, v in job.row().items() if v != ""}
        lines.append(json.dumps(row, separators=(",", ":")))
    return "\n".join(lines) + "\n"
