"""``prices`` and ``historyHalfLifeSeconds`` are the process's (one price table, one
``DomainHistory``): written once at the top of the ``scheduling`` section, held by the first
profile only, read by every profile; a profile entry that writes them, or a second profile that
carries them, is refused naming the key — it would be ignored."""

from __future__ import annotations

import pytest

from coordinator.app.config.scheduling import load_config
from coordinator.core.framework.config import (
    ConfigError,
    ProcessSettings,
    SchedulerConfig,
)
from coordinator.core.plugins.domainscore import HistoricalPerformance
from coordinator.core.plugins.pools import CostEfficiency
from coordinator.core.registry import build_profiles

KUBE = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
PRICES = {"gpuModels": {"H100": {"onDemand": 6.98}}}


def test_the_top_level_settings_reach_every_profile_once() -> None:
    config = load_config(
        {
            "historyHalfLifeSeconds": 30,
            "prices": PRICES,
            "profiles": [{"schedulerName": "topos"}, {"schedulerName": "batch"}],
        }
    )
    assert config.process.history_half_life_s == 30.0
    assert config.process.prices.gpu_models["H100"].on_demand == 6.98
    names = [p.scheduler_name for p in config.other_profiles]
    assert names == ["batch", "topos-agentpools"]
    assert [p.process for p in config.other_profiles] == [ProcessSettings()] * 2
    profiles = list(build_profiles(config))
    assert len(profiles) == 3
    costs = [p for f in profiles for p in f.plugins if isinstance(p, CostEfficiency)]
    histories = [p for f in profiles for p in f.plugins if isinstance(p, HistoricalPerformance)]
    assert len(costs) == len(histories) == 3
    assert {id(c.prices) for c in costs} == {id(config.process.prices)}
    assert {h.history.half_life_s for h in histories} == {30.0}
    assert len({id(h.history) for h in histories}) == 1


@pytest.mark.parametrize(
    ("key", "value"), [("prices", PRICES), ("historyHalfLifeSeconds", 30)], ids=str
)
def test_a_profile_entry_that_sets_a_process_setting_is_refused_naming_it(
    key: str, value: object
) -> None:
    profiles = [{"schedulerName": "topos"}, {"schedulerName": "batch", key: value}]
    with pytest.raises(ConfigError, match=rf"^profiles\[1\]\.{key}: unknown key"):
        load_config({**KUBE, "profiles": profiles})


def test_a_second_profile_carrying_process_settings_is_refused() -> None:
    other = SchedulerConfig(
        scheduler_name="batch", process=ProcessSettings(history_half_life_s=30.0)
    )
    with pytest.raises(ConfigError, match=r"profiles\[1\]: historyHalfLifeSeconds and prices"):
        SchedulerConfig(other_profiles=(other,))
