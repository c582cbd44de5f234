"""The API server's own request counter, ``apiserver_request_total``, read from ``/metrics``.

Its labels name the verb, resource and subresource but not the client, so the KWOK benchmark
runs one scheduler at a time and reads the counter before and after each run: the difference is
that scheduler's requests plus those of the benchmark itself (the pod creates, its watch) and of
KWOK (the pod status writes that make bound pods Running, the deletes). :func:`scheduler_share`
leaves out the rows only those two make, so what is left is the scheduler's.
"""

from __future__ import annotations

import re
import ssl
from collections import Counter
from http.client import HTTPSConnection
from pathlib import Path
from typing import Final

from devcluster.controlplane import ControlPlane

__all__ = [
    "Requests",
    "by_kind",
    "cpu_profile",
    "pod_watch_cache",
    "requests_total",
    "scheduler_share",
]

#: (verb, resource, subresource) → requests.
Requests = Counter[tuple[str, str, str]]

_LINE: Final = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_POD_GAUGE: Final = re.compile(
    r"^(?:apiserver_)?(?P<name>terminated_watchers_total|watch_cache_capacity"
    r'|watch_cache_initializations_total)\{[^}]*resource="pods"[^}]*\} (?P<value>\S+)$',
    re.M,
)
_LABEL: Final = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
#: Rows the benchmark client and KWOK make and neither scheduler does on a successful run:
#: the pod creates, KWOK's status writes (Running) and deletes, the clean-up between runs.
_NOT_THE_SCHEDULERS: Final = frozenset(
    {
        ("POST", "pods", ""),
        ("PATCH", "pods", "status"),
        ("PUT", "pods", "status"),
        ("DELETE", "pods", ""),
        ("PATCH", "nodes", "status"),
        ("PUT", "nodes", "status"),
    }
)


def _get(plane: ControlPlane, path: str, timeout_s: float = 30) -> bytes:
    pki = plane.directory / "pki"
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    conn = HTTPSConnection(
        "127.0.0.1", plane.state.apiserver_port, context=context, timeout=timeout_s
    )
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    finally:
        conn.close()


def cpu_profile(plane: ControlPlane, seconds: int, path: Path) -> None:
    """The API server's own CPU profile over the next ``seconds`` (Go's pprof format, read with
    ``go tool pprof -top``): which of its work a scheduler's requests and watches cost."""
    path.write_bytes(_get(plane, f"/debug/pprof/profile?seconds={seconds}", seconds + 30))


def requests_total(plane: ControlPlane) -> Requests:
    """The counter now, summed over response codes, scopes and API versions."""
    text = _get(plane, "/metrics").decode()
    out: Requests = Counter()
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        labels = dict(_LABEL.findall(m["labels"]))
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
        out[key] += int(float(m["value"]))
    return out


def pod_watch_cache(plane: ControlPlane) -> tuple[int, int, int]:
    """The pods' watch cache now: its capacity (events it holds; it grows while events come
    faster than it can hold ~75 s of them), the pod watches it has closed so far because their
    client fell behind, and how often it was (re-)initialised (which closes every pod watch).
    Each closed watch costs its client a new WATCH."""
    text = _get(plane, "/metrics").decode()
    found = {m["name"]: int(float(m["value"])) for m in _POD_GAUGE.finditer(text)}
    return (
        found.get("watch_cache_capacity", 0),
        found.get("terminated_watchers_total", 0),
        found.get("watch_cache_initializations_total", 0),
    )


def scheduler_share(before: Requests, after: Requests) -> Requests:
    """The requests between two readings, less the rows the benchmark and KWOK make."""
    delta = after.copy()
    delta.subtract(before)
    return Counter(
        {k: v for k, v in delta.items() if v > 0 and (k[0], k[1], k[2]) not in _NOT_THE_SCHEDULERS}
    )


def by_kind(requests: Requests) -> str:
    """``bind 3000, events 3000, watch 9, ...``: the rows, largest first."""

    def name(key: tuple[str, str, str]) -> str:
        verb, resource, sub = key
        if sub == "binding":
            return "bind"
        if resource == "events":
            return f"{verb.lower()} events"
        return f"{verb.lower()} {resource}{'/' + sub if sub else ''}"

    merged: Counter[str] = Counter()
    for key, n in requests.items():
        merged[name(key)] += n
    return ", ".join(f"{k} {n}" for k, n in merged.most_common())
