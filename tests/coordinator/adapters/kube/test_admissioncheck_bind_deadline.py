"""The placement check's bind deadline, read from its AdmissionCheck's annotation
``topos.io/bind-deadline-seconds``: a bad value makes the check inactive with a condition naming
the annotation and the value (Kueue then admits nothing through it); other checks are unharmed."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.adapters.kube.admissioncheck import (
    BIND_DEADLINE,
    DEFAULT_BIND_DEADLINE_S,
    active_condition,
    bind_deadline,
)


def check(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "placement", "annotations": annotations or {}},
        "spec": {"controllerName": "topos.io/placement"},
    }


def test_without_the_annotation_the_default_deadline_applies_and_the_check_is_active() -> None:
    assert bind_deadline(check()) == DEFAULT_BIND_DEADLINE_S
    assert active_condition(check())["status"] == "True"
    assert bind_deadline(check({BIND_DEADLINE: "45"})) == 45
    assert active_condition(check({BIND_DEADLINE: "45"}))["status"] == "True"


@pytest.mark.parametrize("value", ["0", "-5", "2.5", "soon", "", "²"])
def test_a_deadline_that_is_not_whole_seconds_makes_the_check_inactive_naming_it(
    value: str,
) -> None:
    condition = active_condition(check({BIND_DEADLINE: value}))
    assert condition["status"] == "False"
    assert condition["reason"] == "InvalidBindDeadline"
    assert BIND_DEADLINE in condition["message"]
    assert repr(value) in condition["message"]
