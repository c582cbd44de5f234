"""The audit log's pod writes, counted by client: what ``--audit`` prints for kai_gangs and
scheduler_perf (the request counter's ``patch pods/status`` row lumps KWOK's writes with the
scheduler's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from benchmarks.kwok_audit import PodWriters, audit_args


def entry(user: str, verb: str, sub: str = "", stage: str = "ResponseComplete") -> str:
    ref: dict[str, Any] = {"resource": "pods", "namespace": "ns", "name": "p"}
    if sub:
        ref["subresource"] = sub
    return json.dumps({"user": {"username": user}, "verb": verb, "stage": stage, "objectRef": ref})


def test_pod_writes_are_counted_by_client_once_each_completes(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(
        "\n".join(
            [
                entry("bench-topos", "patch", "status"),
                entry("bench-topos", "patch", "status", stage="ResponseStarted"),
                entry("bench-topos", "create", "binding"),
                entry("kwok-controller", "patch", "status"),
                entry("kwok-controller", "list"),  # not a write
                entry("bench-topos", "patch", "status"),
            ]
        )
        + "\n"
        + entry("bench-topos", "patch", "status")  # still being written: the next reading's
    )
    writers = PodWriters(log)
    counts = writers.read()
    assert counts == {
        ("bench-topos", "patch", "status"): 2,
        ("bench-topos", "create", "binding"): 1,
        ("kwok-controller", "patch", "status"): 1,
    }
    assert PodWriters.summary(counts) == (
        "bench-topos: patch pods/status 2, create pods/binding 1; "
        "kwok-controller: patch pods/status 1"
    )
    with log.open("a") as f:
        f.write("\n")
    assert writers.read() == {("bench-topos", "patch", "status"): 1}


def test_the_policy_audits_pod_writes_only_when_asked(tmp_path: Path) -> None:
    def rules() -> list[dict[str, Any]]:
        policy = yaml.safe_load((tmp_path / "audit-policy.yaml").read_text())
        return list(policy["rules"])

    audit_args(tmp_path)
    assert [r.get("verbs") for r in rules()] == [["list", "watch"], None]
    audit_args(tmp_path, writes=True)
    assert [r.get("verbs") for r in rules()] == [
        ["list", "watch"],
        ["create", "update", "patch", "delete"],
        None,
    ]
