"""``health.deviceTaints`` in the config file: on with ``NoSchedule`` by default, turned off or
to ``NoExecute`` / ``None`` by the file; an effect the API does not define or an unknown key
stops start-up naming the key and the value."""

from __future__ import annotations

import pytest

from common.configdoc import load_yaml
from coordinator.app.config.load import ConfigError, parse_config


def test_on_with_no_schedule_by_default() -> None:
    section = parse_config(load_yaml("{}")).health.device_taints
    assert (section.enabled, section.effect) == (True, "NoSchedule")


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute", "None"])
def test_the_effects_the_api_defines_are_read(effect: str) -> None:
    text = f"health: {{deviceTaints: {{effect: {effect}}}}}"
    assert parse_config(load_yaml(text)).health.device_taints.effect == effect


def test_it_can_be_turned_off() -> None:
    off = parse_config(load_yaml("health: {deviceTaints: {enabled: false}}"))
    assert off.health.device_taints.enabled is False


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "health: {deviceTaints: {effect: Sometimes}}",
            ["health.deviceTaints.effect", "'Sometimes'", "NoSchedule, NoExecute, None"],
        ),
        ("health: {deviceTaints: {effect: PreferNoSchedule}}", ["'PreferNoSchedule'"]),
        (
            "health: {deviceTaints: {enabled: maybe}}",
            ["health.deviceTaints.enabled", "got a string"],
        ),
        ("health: {deviceTaint: {enabled: false}}", ["health.deviceTaint"]),
    ],
)
def test_a_bad_value_stops_start_up_naming_key_and_value(text: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(load_yaml(text))
    for word in words:
        assert word in str(caught.value), str(caught.value)
