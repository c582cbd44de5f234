"""``kubectl topos whatif``'s text: the coordinator's what-if answer (``POST /v1/whatif``) as a
person reads it — fits or not, where each pod would go, why not (the words of the pods'
FailedScheduling Event), when it would start, and what would make it fit, smallest change
first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cli.kubectl_rows import table

__all__ = ["PLACEMENT_HEADERS", "whatif_text"]

PLACEMENT_HEADERS = ["POD", "NODE", "GPUS", "LINK", "NUMA", "DOMAIN", "DRA"]


def span(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _ints(values: Sequence[Any]) -> str:
    return ",".join(str(v) for v in values) or "-"


def _placement_rows(placements: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for p in placements:
        domain = p.get("domain") or {}
        where = "/".join(domain[t] for t in ("zone", "spine", "leaf") if t in domain) or "-"
        gpus = _ints(p.get("gpu_indices") or [])
        if p.get("gpu_share"):
            gpus = f"{gpus} ({p['gpu_share']})"
        rows.append(
            [
                str(p.get("pod", "?")),
                str(p.get("node", "?")),
                gpus,
                str(p.get("link") or "-"),
                _ints(p.get("numa") or []),
                where,
                ", ".join(p.get("dra") or []) or "-",
            ]
        )
    return rows


def whatif_text(doc: Mapping[str, Any]) -> str:
    lines: list[str] = []
    for w in doc.get("workloads") or []:
        n = w.get("pods", 0)
        lines.append(
            f"{w.get('kind')} {w.get('namespace')}/{w.get('name')}: {n} pod{'s' * (n != 1)}"
        )
    fits = bool(doc.get("fits"))
    lines.append(
        f"Fits now: {'yes' if fits else 'no'} (on {doc.get('nodes', 0)} nodes, nothing changed)"
    )
    start = doc.get("predicted_start_s")
    if not fits and isinstance(start, int | float):
        waits = doc.get("waits_for") or []
        after = f", when {', '.join(waits)} end{'s' * (len(waits) == 1)}" if waits else ""
        lines.append(f"Expected to start in ~{span(float(start))}{after}")
    for unit in doc.get("units") or []:
        lines.append("")
        lines.append(f"{unit.get('unit')}: {unit.get('message')}")
        if unit.get("placements"):
            lines.append(table(PLACEMENT_HEADERS, _placement_rows(unit["placements"])))
    suggestions = doc.get("suggestions") or []
    if suggestions:
        lines.append("")
        lines.append("What would make it fit (smallest change first):")
        for s in suggestions:
            lines.append(f"  {s.get('rank')}. {s.get('summary')}  [{s.get('kind')}]")
    elif not fits:
        lines.append("")
        lines.append("No single change found that makes it fit.")
    for note in doc.get("notes") or []:
        lines.append(f"Note: {note}")
    return "\n".join(lines)
