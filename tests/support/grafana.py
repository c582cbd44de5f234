"""The Grafana dashboard shipped in ``deploy/grafana/`` and the metric names its queries select."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

__all__ = ["DASHBOARD", "dashboard", "expressions", "metric_names"]

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "topos-scheduler.json"
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless"}
_KEYWORDS |= {"bool", "offset"}


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def expressions(doc: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", ())]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not its functions, labels or keywords)."""
    text = re.sub(r'"[^"]*"', "", expr)  # label values
    text = re.sub(r"\{[^}]*\}", "", text)  # matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)  # grouping labels
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        rest = text[m.end() :].lstrip()
        if rest.startswith("(") or m.group() in _KEYWORDS:
            continue  # a function or an operator
        names.add(m.group())
    return names
