"""``gangs.protections`` in the config file: durations by PriorityClass, namespace and default
become the preemptor's protections; a value that does not parse, a negative budget or an unknown
key stops start-up naming the key and the value."""

from __future__ import annotations

import pytest

from common.configdoc import load_yaml
from coordinator.app.config.load import ConfigError, parse_config

GOOD = """
gangs:
  protections:
    minRuntime:
      default: 60
      priorityClasses: {batch: 10m}
      namespaces: {research: 1h30m}
      annotationMax: 2h
    preemptionDelay: {default: 30s}
    evictionsPerHour: 20
"""


def test_the_protections_reach_the_gang_settings() -> None:
    settings = parse_config(load_yaml(GOOD)).gangs.settings()
    p = settings.protections
    assert p.min_runtime.for_pod("ml", "batch") == 600.0
    assert p.min_runtime.for_pod("research", "") == 5400.0
    assert p.min_runtime.for_pod("ml", "") == 60.0
    assert p.min_runtime.for_pod("ml", "batch", own=5.0) == 5.0  # the annotation wins
    assert p.min_runtime.for_pod("ml", "batch", own=86400.0) == 7200.0  # up to annotationMax
    assert p.preemption_delay.for_pod("ml", "", own=86400.0) == 86400.0  # no cap given
    assert p.preemption_delay.default_s == 30.0
    assert p.evictions_per_hour == 20


def test_left_out_nothing_is_protected() -> None:
    p = parse_config(load_yaml("gangs: {}")).gangs.settings().protections
    assert p.min_runtime.for_pod("ml", "batch") == 0.0
    assert p.preemption_delay.for_pod("ml", "") == 0.0
    assert p.evictions_per_hour == 0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "gangs: {protections: {minRuntime: {priorityClasses: {batch: soon}}}}",
            ["priorityClasses.batch", "'soon'"],
        ),
        ("gangs: {protections: {preemptionDelay: {default: -3}}}", ["default", "-3"]),
        ("gangs: {protections: {evictionsPerHour: -1}}", ["evictionsPerHour"]),
        ("gangs: {protections: {minRuntime: {annotationMax: 1d}}}", ["annotationMax", "'1d'"]),
        ("gangs: {protections: {minRuntime: {namespaces: {Bad_NS: 5m}}}}", ["'Bad_NS'"]),
        ("gangs: {protections: {minRunTime: {}}}", ["minRunTime"]),
    ],
)
def test_a_bad_value_stops_start_up_naming_key_and_value(text: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(load_yaml(text))
    message = str(caught.value)
    for word in words:
        assert word in message, message
    assert "protections" in message
