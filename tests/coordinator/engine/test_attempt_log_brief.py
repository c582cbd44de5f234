"""An attempt past the newest detailed ones is kept in brief: the decision keeps every field but
its per-node verdicts (only the chosen node's) and its cycle state, the attempt every field."""

from __future__ import annotations

import dataclasses
from typing import Any

from coordinator.core.framework.results import Decision
from coordinator.engine.attempts import Attempt, AttemptLog


def _decision(name: str) -> Decision:
    given: dict[str, Any] = {f.name: object() for f in dataclasses.fields(Decision)}
    given.update(pod_key=f"ns/{name}", node="n1", breakdown={"GpuTopology": 5.0}, feasible=2)
    return Decision(**given)


def test_a_decision_kept_in_brief_keeps_every_field_but_the_verdicts_and_the_state() -> None:
    log = AttemptLog(kept=10, detailed=1)
    first = _decision("p0")
    attempt = Attempt("ns/p0", "uid-0", 12.5, "bound", first, "Successfully assigned", "topos")
    log.record(attempt)
    log.record(Attempt("ns/p1", "uid-1", 13.0, "bound", _decision("p1"), "m", "topos"))
    kept = log.last("ns/p0")  # shortened: p1 is the newest detailed decision
    assert kept is not None
    for f in dataclasses.fields(Attempt):
        if f.name != "result":
            assert getattr(kept, f.name) == getattr(attempt, f.name), f.name
    short = kept.result
    assert isinstance(short, Decision)
    for f in dataclasses.fields(Decision):
        if f.name not in ("verdicts", "state"):
            assert getattr(short, f.name) is getattr(first, f.name), f.name
    assert list(short.verdicts) == ["n1"]
    assert dict(short.verdicts["n1"].scores) == {"GpuTopology": 5.0}
    assert short.state is not first.state
