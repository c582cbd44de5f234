"""``defragmentation`` in the config file: its settings reach the gang runtime's preemptor; YAML's
bare ``off`` (read as ``false``) is ``off``; a bad value or an unknown key stops start-up naming
the key and the value."""

from __future__ import annotations

import pytest

from common.configdoc import load_yaml
from coordinator.app.config.load import ConfigError, parse_config
from coordinator.core.preemption.defrag import DefragSettings


def test_the_settings_are_read() -> None:
    text = """
defragmentation:
  mode: background
  maxLossRatio: 0.02
  horizonSeconds: 7200
  priorityStep: 50
  evictionsPerHour: 8
  intervalSeconds: 30
  compactRacks: true
"""
    s = parse_config(load_yaml(text)).defragmentation.settings()
    assert (s.mode, s.max_loss_ratio, s.horizon_s) == ("background", 0.02, 7200.0)
    assert (s.priority_step, s.evictions_per_hour, s.interval_s) == (50, 8, 30.0)
    assert s.compact_racks
    assert not parse_config(load_yaml("{}")).defragmentation.settings().compact_racks


def test_on_demand_by_default_and_a_bare_off_is_off() -> None:
    assert parse_config(load_yaml("{}")).defragmentation.settings().mode == "onDemand"
    off = parse_config(load_yaml("defragmentation: {mode: off}")).defragmentation.settings()
    assert off.mode == "off"
    assert not off.enabled


def test_gathering_is_on_where_defragmentation_is_unless_turned_off() -> None:
    def settings(text: str) -> DefragSettings:
        return parse_config(load_yaml(text)).defragmentation.settings()

    assert settings("{}").gathers
    assert settings("defragmentation: {mode: background}").gathers
    assert not settings("defragmentation: {mode: off}").gathers
    assert not settings("defragmentation: {gather: false}").gathers
    assert settings("defragmentation: {gather: false}").enabled  # the rest stays on
    assert not settings("defragmentation: {mode: background, gather: off}").gathers


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("defragmentation: {mode: sometimes}", ["defragmentation.mode", "'sometimes'"]),
        ("defragmentation: {mode: on}", ["defragmentation.mode", "True"]),
        ("defragmentation: {maxLossRatio: -1}", ["defragmentation.maxLossRatio", "-1"]),
        ("defragmentation: {horizonSeconds: 0}", ["defragmentation.horizonSeconds", "0"]),
        ("defragmentation: {intervalSeconds: soon}", ["defragmentation.intervalSeconds"]),
        ("defragmentation: {mod: off}", ["defragmentation.mod"]),
        ("defragmentation: {gather: sometimes}", ["defragmentation.gather", "'sometimes'"]),
        ("defragmentation: {gather: 1}", ["defragmentation.gather", "1 is neither"]),
        (
            "defragmentation: {compactRacks: maybe}",
            ["defragmentation.compactRacks", "true or false"],
        ),
    ],
)
def test_a_bad_value_stops_start_up_naming_key_and_value(text: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(load_yaml(text))
    for word in words:
        assert word in str(caught.value)
