"""The coordinator's configuration file with the AgentPool keys: a negative price or a scorer
that cannot be loaded stops start-up naming the entry; a good file reaches the running
scheduler (the price table, the pool weights, the custom scorer, one set of carbon readings)."""

from __future__ import annotations

import pytest

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.app.config.load import ConfigError, parse_config
from coordinator.app.main import running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.app.scheduler import RUNNING
from coordinator.core.plugins.domainscore import DomainUtilisation, HistoricalPerformance
from coordinator.core.plugins.pools import CostEfficiency, PoolPlacement
from coordinator.inventory.store import Inventory


@pytest.mark.parametrize(
    ("scheduling", "message"),
    [
        (
            {"prices": {"instanceTypes": {"p4d.24xlarge": -32.77}}},
            "'scheduling' in /etc/topos/config.yaml: prices.instanceTypes.p4d.24xlarge: "
            "a price cannot be negative (-32.77)",
        ),
        (
            {"customScorers": [{"name": "Power", "module": "nowhere.power:Power"}]},
            "'scheduling' in /etc/topos/config.yaml: customScorers[0].module: nowhere.power:Power "
            "cannot be loaded: ModuleNotFoundError",
        ),
    ],
)
def test_a_bad_entry_stops_start_up_by_name(scheduling: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"scheduling": scheduling}, source="/etc/topos/config.yaml")
    assert message in str(caught.value)


async def test_the_pool_settings_reach_the_running_scheduler() -> None:
    config = parse_config(
        {
            "auth": {"enabled": False},
            "scheduling": {
                "prices": {"gpuModels": {"H100": 6.98}},
                "agentPools": {"weights": {"model_cache": 9}},
                "customScorers": [
                    {"name": "Flaky", "module": "tests.support.scorers:FailsSometimes"}
                ],
            },
        }
    )
    app = wire(config, MemoryBackend(MemoryCluster(Inventory())))
    async with running(app):
        runtime = app[RUNNING].runtime
        assert runtime is not None
        framework = runtime.scheduler.framework
        assert framework.config.process.prices.gpu_models["H100"].on_demand == 6.98
        pools = runtime.scheduler.profiles.for_name("topos-agentpools")
        assert {p.name: w for p, w in pools.score}["ModelCache"] == 9
        assert "Flaky" in {p.name for p, _ in framework.score}
        (gate,) = [p for p in framework.plugins if isinstance(p, PoolPlacement)]
        assert gate.carbon is app[RUNNING].carbon  # what the controller updates
        assert app[RUNNING].prices is config.scheduling.process.prices  # what the cost policy reads


async def test_the_gangs_leaf_label_reaches_every_profiles_leaf_scorers() -> None:
    """``gangs.domainKeys.leaf`` is the process's: the leaf scorers of every profile read it
    (their own args never carry it), as do the gangs."""
    config = parse_config(
        {"auth": {"enabled": False}, "gangs": {"domainKeys": {"leaf": "example.com/rack"}}}
    )
    app = wire(config, MemoryBackend(MemoryCluster(Inventory())))
    async with running(app):
        runtime = app[RUNNING].runtime
        assert runtime is not None
        leaf_scorers = [
            p
            for framework in runtime.scheduler.profiles
            for p in framework.plugins
            if isinstance(p, DomainUtilisation | HistoricalPerformance)
        ]
        assert len(leaf_scorers) == 2 * len(runtime.scheduler.profiles)
        assert {p.leaf_label for p in leaf_scorers} == {"example.com/rack"}
        (cost,) = [p for p in runtime.scheduler.framework.plugins if isinstance(p, CostEfficiency)]
        assert cost.prices is app[RUNNING].prices  # one price table for the process
