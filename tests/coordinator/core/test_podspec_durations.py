"""One duration grammar for every key Topos reads (docs/scheduling.md, "Durations"), and one
reader of the gang keys: the pod parser and gang identity accept and reject the same pods."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.gangs.identity import GangProblem, GangSpec, gang_of
from coordinator.core.podspec.durations import DurationError, parse_duration
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("300", 300.0),  # a bare number is seconds
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),  # the form docs/gangs.md shows
        ("1.5h", 5400.0),
        (".5h", 1800.0),
        ("2h45m30s", 9930.0),
        ("1m30.5s", 90.5),
        ("1500ms", 1.5),
        ("+5m", 300.0),
        (" 5m ", 300.0),
        ("168h", 7 * 86400.0),
    ],
)
def test_accepted_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("soon", "malformed duration 'soon'"),
        ("", "malformed duration ''"),
        ("h", "malformed"),
        ("5x", "malformed"),
        ("1h 30m", "malformed"),
        ("8d", "malformed"),  # no day unit, as in Go
        ("-5m", "negative"),
        ("0", "must be positive"),
        ("0s", "must be positive"),
        ("169h", "longer than 7 days"),
    ],
)
def test_rejected_durations_say_why(text: str, fragment: str) -> None:
    with pytest.raises(DurationError) as err:
        parse_duration(text)
    assert fragment in str(err.value)


def gang_pod(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "w-0",
            "namespace": "ml",
            "labels": labels,
            "annotations": annotations or {},
        },
        "spec": {"containers": [{"name": "c"}]},
    }


TOPOS = {"topos.io/gang": "train", "topos.io/gang-min": "4"}


def test_a_1h30m_gang_timeout_is_read_alike_by_the_parser_and_gang_identity() -> None:
    pod = gang_pod(TOPOS, {"topos.io/gang-timeout": "1h30m"})
    request = parse_pod(pod)
    assert isinstance(request, PodRequest), request
    assert request.gang is not None
    assert request.gang.timeout_s == 5400.0
    spec = gang_of(pod)
    assert isinstance(spec, GangSpec)
    assert spec.timeout_s == 5400.0


@pytest.mark.parametrize(
    ("labels", "annotations", "field", "fragment"),
    [
        (TOPOS, {"topos.io/gang-timeout": "soon"}, "annotations[topos.io/gang-timeout]", "soon"),
        (TOPOS, {"topos.io/gang-timeout": "-1h"}, "annotations[topos.io/gang-timeout]", "negative"),
        (
            {"topos.io/gang": "g", "topos.io/gang-min": "0"},
            {},
            "labels[topos.io/gang-min]",
            "at least 1 member",
        ),
        (
            {
                "pod-group.scheduling.kubenexus.io/name": "g",
                "pod-group.scheduling.kubenexus.io/min-available": "lots",
            },
            {},
            "labels[pod-group.scheduling.kubenexus.io/min-available]",
            "whole number",
        ),
        ({"topos.io/gang": "g"}, {}, "labels[topos.io/gang-min]", "no member count"),
        ({"topos.io/gang-min": "2"}, {}, "labels[topos.io/gang-min]", "without a gang name"),
        ({"topos.io/gang": ""}, {}, "labels[topos.io/gang]", "must not be empty"),
    ],
)
def test_bad_gang_keys_get_the_same_verdict_from_both(
    labels: dict[str, str], annotations: dict[str, str], field: str, fragment: str
) -> None:
    pod = gang_pod(labels, annotations)
    error = parse_pod(pod)
    assert isinstance(error, PodSpecError)
    assert error.field == f"metadata.{field}"
    assert fragment in error.message
    problem = gang_of(pod)
    assert isinstance(problem, GangProblem)
    assert not problem.waiting
    assert problem.message == error.text
