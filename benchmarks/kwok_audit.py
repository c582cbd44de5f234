"""Who lists and watches pods during the KWOK benchmark: the API server's audit log.

``apiserver_request_total`` names no client, so pod LISTs and WATCHes that neither scheduler
makes land on whichever runs at the time. With ``--audit`` the benchmark's API server writes an
audit log (``--audit-policy-file``) holding, at the ``Metadata`` level, only the pod LISTs and
WATCHes — who (user name, user agent), what (the request URI, its selectors), when — and
:class:`PodListers` counts them by client between two readings: each LIST once it completes,
each WATCH once it starts. Every client of the benchmark has a user of its own (``kwok-controller``,
``bench-topos``, ``bench-kube-scheduler``; the benchmark itself is ``topos-admin``). With them
the pod watches the API server closed meanwhile because their client fell behind
(``apiserver_terminated_watchers_total``): on a fresh API server the pods' watch cache is small,
so are the buffers of the watches opened then, and a burst of pod events closes them.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.apiserver_metrics import pod_watch_cache
from devcluster.controlplane import ControlPlane

__all__ = ["PodListers", "PodWriters", "audit_args"]

_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "verbs": ["list", "watch"], "resources": [{"resources": ["pods"]}]},
        {"level": "None"},
    ],
}
#: With ``writes``: every write to a pod or its subresources too (status, binding, eviction).
_WRITES = {
    "level": "Metadata",
    "verbs": ["create", "update", "patch", "delete"],
    "resources": [{"resources": ["pods", "pods/status", "pods/binding", "pods/eviction"]}],
}


def audit_args(work: Path, *, writes: bool = False) -> tuple[str, ...]:
    """kube-apiserver flags writing the pod LIST/WATCH audit log to ``work/audit.log``
    (``writes``: and the pod writes, which :class:`PodWriters` counts)."""
    policy = work / "audit-policy.yaml"
    rules = _POLICY["rules"]
    assert isinstance(rules, list)
    body = {**_POLICY, "rules": [*rules[:-1], _WRITES, rules[-1]] if writes else rules}
    policy.write_text(yaml.safe_dump(body))
    return (
        f"--audit-policy-file={policy}",
        f"--audit-log-path={work / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-maxbackup=1",
    )


@dataclass
class PodListers:
    """Reads the audit log on from where the last reading stopped."""

    path: Path
    plane: ControlPlane
    offset: int = 0
    terminated: int = 0
    initialised: int = 0
    examples: dict[tuple[str, str], str] = field(default_factory=dict)

    def read(self) -> Counter[tuple[str, str, str]]:
        """(user, user agent, verb) → requests since the last reading."""
        _, self.terminated, self.initialised = pod_watch_cache(self.plane)
        return self._read()

    def _read(self) -> Counter[tuple[str, str, str]]:
        counts: Counter[tuple[str, str, str]] = Counter()
        events, self.offset = _events_after(self.path, self.offset)
        for event in events:
            verb, stage = event.get("verb", ""), event.get("stage", "")
            if (verb, stage) not in (("list", "ResponseComplete"), ("watch", "ResponseStarted")):
                continue
            user = (event.get("user") or {}).get("username", "?")
            agent = str(event.get("userAgent", "?")).split(" ")[0]
            counts[user, agent, verb] += 1
            self.examples.setdefault((user, verb), str(event.get("requestURI", "")))
        return counts

    def summary(self) -> str:
        """One line: the pod LISTs/WATCHes since the last reading, by client."""
        counts = self._read()
        terminated, initialised = self.terminated, self.initialised
        capacity, self.terminated, self.initialised = pod_watch_cache(self.plane)
        closed = (
            f"; pod watches the API server closed (client behind): {self.terminated - terminated}"
            f"; pods' watch cache capacity {capacity:,}, re-initialised "
            f"{self.initialised - initialised} times (each closes every pod watch)"
        )
        if not counts:
            return "audit: no pod LIST/WATCH" + closed
        parts = [
            f"{user} ({agent}) {verb.upper()} {n:,} e.g. {self.examples[user, verb][:120]}"
            for (user, agent, verb), n in counts.most_common()
        ]
        return "audit: pod LIST/WATCH by client: " + "; ".join(parts) + closed


def _events_after(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The audit events written to ``path`` after byte ``offset``, and the offset to read from
    next (a line still being written waits for the next reading)."""
    if not path.exists():
        return [], offset
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    return [json.loads(line) for line in data[:end].splitlines()], offset + end


@dataclass
class PodWriters:
    """The pod writes in the audit log (``audit_args(writes=True)``) from where the last reading
    stopped: (user, verb, subresource) → requests, each counted once it completes."""

    path: Path
    offset: int = 0

    def read(self) -> Counter[tuple[str, str, str]]:
        counts: Counter[tuple[str, str, str]] = Counter()
        events, self.offset = _events_after(self.path, self.offset)
        for event in events:
            ref = event.get("objectRef") or {}
            verb = event.get("verb", "")
            if event.get("stage") != "ResponseComplete" or ref.get("resource") != "pods":
                continue
            if verb not in ("create", "update", "patch", "delete"):
                continue
            user = (event.get("user") or {}).get("username", "?")
            counts[user, verb, ref.get("subresource", "")] += 1
        return counts

    @staticmethod
    def summary(counts: Counter[tuple[str, str, str]]) -> str:
        """``user: verb pods[/sub] n, ...; ...`` by user, most writes first."""
        users: dict[str, list[str]] = {}
        for (user, verb, sub), n in counts.most_common():
            what = f"pods/{sub}" if sub else "pods"
            users.setdefault(user, []).append(f"{verb} {what} {n:,}")
        return "; ".join(f"{user}: {', '.join(parts)}" for user, parts in users.items())
