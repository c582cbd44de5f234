"""Values that used to be accepted and then left a coordinator running but useless (issue #34):
a namespace or name Kubernetes would never accept, an infinite or not-a-number setting, a key
written twice in one mapping, a plugin name that names no plugin. Each is refused when the file
is loaded — one line naming the key and the value — and, on a live reload, refused while the
running settings stay in force."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from common.configdoc import load_yaml
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.api.keys import METRICS
from coordinator.app.config.load import ConfigError, load_file
from coordinator.app.config.scheduling import load_config
from coordinator.app.main import running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.app.reload import restart_needed
from coordinator.app.scheduler import RUNNING
from coordinator.core.framework.config import ConfigError as SchedulingError
from coordinator.inventory.store import Inventory
from tests.support.polling import eventually

LABEL = "a DNS-1123 label"
SUBDOMAIN = "a DNS-1123 subdomain"


def refused(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_file(str(path))
    return str(caught.value).replace(str(path), "F")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "leaderElection: {namespace: topos_system}\n",
            "'leaderElection.namespace' in F: 'topos_system' is not a namespace name (" + LABEL,
        ),
        (
            "leaderElection: {namespace: bad ns}\n",
            "'leaderElection.namespace' in F: 'bad ns' is not a namespace name (" + LABEL,
        ),
        (
            "leaderElection: {leaseName: Topos-Lease}\n",
            "'leaderElection.leaseName' in F: 'Topos-Lease' is not an object name (" + SUBDOMAIN,
        ),
        (
            'scheduler: {namespace: "Not_A_Namespace!"}\n',
            "'scheduler.namespace' in F: 'Not_A_Namespace!' is not a namespace name (" + LABEL,
        ),
        (
            "neuronetes: {namespace: ML}\n",
            "'neuronetes.namespace' in F: 'ML' is not a namespace name (" + LABEL,
        ),
        (
            "auth: {agentServiceAccounts: [topos_system/topos-agent]}\n",
            "'auth' in F: agentServiceAccounts entry 'topos_system/topos-agent': 'topos_system' is "
            "not a namespace name",
        ),
        (
            "scheduler: {nodeSelector: {'pool name': gpu}}\n",
            "'scheduler.nodeSelector' in F: 'pool name' is not a label key",
        ),
        (
            "scheduler: {nodeSelector: {pool: 'a b'}}\n",
            "'scheduler.nodeSelector.pool' in F: 'a b' is not a label value",
        ),
        (
            "gangs: {domainKeys: {leaf: 'rack id'}}\n",
            "'gangs.domainKeys.leaf' in F: 'rack id' is not a label key",
        ),
        (
            "gangs: {topologyLevels: [example.com/rack, nvidia.com/gpu.clique, example.com/tor]}\n",
            "'gangs.topologyLevels' in F: level 'example.com/tor' is below "
            "'nvidia.com/gpu.clique': an NVLink clique sits directly above the node",
        ),
        (
            "gangs: {domainKeys: {leaf: example.com/tor}, topologyLevels: [example.com/rack]}\n",
            "'gangs' in F: domainKeys and topologyLevels both name the tree: keep one",
        ),
        (
            "gangs: {tree: {source: kueue}}\n",
            "'gangs.tree.topology' in F: '' is not an object name (source kueue follows the "
            "Topology it names)",
        ),
        (
            "gangs: {tree: {source: volcano, topology: default}}\n",
            "'gangs.tree.topology' in F: 'default' is set but source 'volcano' reads no "
            "Topology (kueue or kai does)",
        ),
        (
            "gangs: {tree: {source: kai, topology: default}, topologyLevels: [example.com/rack]}\n",
            "'gangs' in F: tree.source 'kai' names the tree: leave domainKeys and topologyLevels "
            "out",
        ),
    ],
)
def test_a_name_kubernetes_would_refuse_is_refused_at_load(
    tmp_path: Path, text: str, message: str
) -> None:
    assert refused(tmp_path, text).startswith(message)


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
@pytest.mark.parametrize(
    "key",
    [
        "coordinator.staleTtlSeconds",
        "coordinator.sweepIntervalSeconds",
        "coordinator.reloadIntervalSeconds",
        "leaderElection.leaseDurationSeconds",
        "leaderElection.renewDeadlineSeconds",
        "kube.qps",
        "gangs.backoffSeconds",
        "auth.cacheTTLSeconds",
        "scheduler.agentGraceSeconds",
        "neuronetes.resyncSeconds",
        "scheduling.historyHalfLifeSeconds",
        "scheduling.scoringWeights.resourceAvailability",
    ],
)
def test_an_infinite_or_not_a_number_setting_is_refused(
    tmp_path: Path, key: str, value: str
) -> None:
    section, _, rest = key.partition(".")
    inner = rest.split(".")
    nested = f"{{{inner[-1]}: {value}}}"
    for name in reversed(inner[:-1]):
        nested = f"{{{name}: {nested}}}"
    assert refused(tmp_path, f"{section}: {nested}\n") == (
        f"'{key}' in F: expected a finite number, got {value}"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "coordinator: {reloadIntervalSeconds: 1.0e-9}\n",
            "'coordinator.reloadIntervalSeconds' in F: 1e-09 would read the file in a busy loop "
            "(0 for never, or at least 0.01)",
        ),
        (
            "coordinator: {sweepIntervalSeconds: 1.0e-9}\n",
            "'coordinator.sweepIntervalSeconds' in F: expected a number >= 0.01, got 1e-09",
        ),
    ],
)
def test_a_timer_so_short_it_would_spin_is_refused(tmp_path: Path, text: str, message: str) -> None:
    assert refused(tmp_path, text) == message


def test_a_reload_interval_of_zero_still_means_never(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("coordinator: {reloadIntervalSeconds: 0, sweepIntervalSeconds: 0.01}\n")
    assert load_file(str(path)).coordinator.reload_interval_s == 0


def test_the_scheduling_parser_alone_refuses_non_finite_numbers_too() -> None:
    with pytest.raises(SchedulingError, match=r"^prices\.default: expected a finite number"):
        load_config("prices: {default: .inf}\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "coordinator:\n  staleTtlSeconds: 30\n  staleTtlSeconds: 60\n",
            "key 'staleTtlSeconds' appears twice in one mapping (lines 2 and 3)",
        ),
        (
            "scheduler: {enabled: true}\nauth: {enabled: false}\nscheduler: {enabled: false}\n",
            "key 'scheduler' appears twice in one mapping (lines 1 and 3)",
        ),
        (
            # a seed's KubeSchedulerConfiguration as the scheduling section
            "scheduling:\n"
            "  apiVersion: kubescheduler.config.k8s.io/v1\n"
            "  kind: KubeSchedulerConfiguration\n"
            "  profiles:\n"
            "  - schedulerName: topos\n"
            "    plugins:\n"
            "      score:\n"
            "        disabled: [{name: NodeResourcesBalancedAllocation}]\n"
            "    schedulerName: other\n",
            "key 'schedulerName' appears twice in one mapping (lines 5 and 9)",
        ),
    ],
)
def test_a_key_written_twice_is_refused_naming_it_and_its_lines(
    tmp_path: Path, text: str, message: str
) -> None:
    assert refused(tmp_path, text) == f"config F is not valid YAML: {message}; keep one"


def test_a_merge_key_may_still_be_overridden() -> None:
    text = "base: &base {staleTtlSeconds: 30, sweepIntervalSeconds: 5}\n"
    text += "coordinator:\n  <<: *base\n  staleTtlSeconds: 45\n"
    assert load_yaml(text)["coordinator"] == {"staleTtlSeconds": 45, "sweepIntervalSeconds": 5}


def test_a_plugin_name_that_names_no_plugin_is_refused_with_the_valid_ones(
    tmp_path: Path,
) -> None:
    message = refused(tmp_path, "scheduling: {disabled_plugins: [GpuTopolgy]}\n")
    assert message.startswith(
        "'scheduling' in F: disabled_plugins: unknown plugin 'GpuTopolgy' — did you mean "
        "'GpuTopology'? (the plugins: CliqueKeep, ComputeDomainClique, CostEfficiency, "
    )
    assert "NodeResourcesFit" in message
    # a custom scorer's name, or a plugin enabled_plugins adds, may be disabled
    load_config(
        {
            "customScorers": [{"name": "Mine", "module": "tests.support.scorers:FailsSometimes"}],
            "disabled_plugins": ["Mine", "GpuPacking"],
        }
    )
    path = tmp_path / "config.yaml"
    path.write_text("scheduling: {enabled_plugins: [PowerDraw]}\n")
    with pytest.raises(ConfigError) as caught:
        wire(load_file(str(path)), MemoryBackend(MemoryCluster(Inventory())))
    assert str(caught.value).startswith(
        "'scheduling': enabled_plugins: unknown plugin 'PowerDraw' "
        "(the plugins: CliqueKeep, ComputeDomainClique, CostEfficiency"
    )


@pytest.mark.parametrize("source", ["volcano", "kueue", "kai"])
def test_a_watched_tree_source_on_the_in_memory_backend_is_refused_naming_it(
    tmp_path: Path, source: str
) -> None:
    # HyperNodes and Topologies live in an API server: the in-memory cluster has none to read
    topology = ", topology: default" if source != "volcano" else ""
    path = tmp_path / "config.yaml"
    path.write_text(f"gangs: {{tree: {{source: {source}{topology}}}}}\n")
    with pytest.raises(ConfigError) as caught:
        wire(load_file(str(path)), MemoryBackend(MemoryCluster(Inventory())))
    assert str(caught.value) == (
        f"config: gangs.tree.source: {source!r} reads objects from the API server, and the "
        "in-memory backend has none: give the tree as node labels (gangs.domainKeys or "
        "gangs.topologyLevels)"
    )
    # the same levels as node labels are what the in-memory backend runs
    path.write_text("gangs: {topologyLevels: [example.com/block, example.com/rack]}\n")
    wire(load_file(str(path)), MemoryBackend(MemoryCluster(Inventory())))


# --- a live reload ------------------------------------------------------------------------------

HEAD = "coordinator: {reloadIntervalSeconds: 0.05}\n"


async def test_a_reload_refuses_each_bad_value_and_keeps_the_running_settings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(HEAD + "scheduling: {weights: {numa_fit: 7}}\n")
    app = wire(
        load_file(str(path)), MemoryBackend(MemoryCluster(Inventory())), config_path=str(path)
    )
    registry = app[METRICS].registry

    def refusals() -> float:
        return registry.get_sample_value("topos_config_reloads_total", {"result": "refused"}) or 0

    bad = [
        ("scheduler: {namespace: Not_A_Namespace}\n", "'Not_A_Namespace' is not a namespace"),
        ("leaderElection: {namespace: bad ns}\n", "'leaderElection.namespace' in"),
        ("coordinator2: 1\n", "unknown section 'coordinator2'"),
        ("scheduling: {historyHalfLifeSeconds: .inf}\n", "got .inf"),
        ("scheduling: {disabled_plugins: [Nope]}\n", "unknown plugin 'Nope'"),
        ("scheduling: {enabled_plugins: [Nope]}\n", "enabled_plugins: unknown plugin 'Nope'"),
        ("scheduling: {packing: spread}\nscheduling: {packing: binpack}\n", "appears twice"),
    ]
    async with running(app):
        runtime = app[RUNNING].runtime
        assert runtime is not None
        framework = runtime.scheduler.framework
        assert framework.config.weights["NumaTopology"] == 7
        with caplog.at_level(logging.ERROR, logger="coordinator.app.reload"):
            for i, (text, message) in enumerate(bad, start=1):
                path.write_text(HEAD + text)
                await eventually(lambda i=i: refusals() == i, what=f"refusal {i}")  # type: ignore[misc]
                assert message in caplog.text
                assert runtime.scheduler.framework is framework  # the old settings keep running


# --- what a reload names as needing a restart ----------------------------------------------------

ELECTION = "leaderElection: {enabled: false, leaseDurationSeconds: %d, renewDeadlineSeconds: 10}\n"


def test_the_same_file_read_twice_needs_no_restart(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(ELECTION % 15)  # the identity left out: made up by the elector, not the file
    assert restart_needed(load_file(str(path)), load_file(str(path))) == []


async def test_a_reload_warns_only_about_restart_keys_that_changed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(HEAD + ELECTION % 15 + "scheduling: {weights: {numa_fit: 7}}\n")
    app = wire(
        load_file(str(path)), MemoryBackend(MemoryCluster(Inventory())), config_path=str(path)
    )
    registry = app[METRICS].registry

    def applied() -> float:
        return registry.get_sample_value("topos_config_reloads_total", {"result": "applied"}) or 0

    async with running(app):
        with caplog.at_level(logging.WARNING, logger="coordinator.app.reload"):
            path.write_text(HEAD + ELECTION % 15 + "scheduling: {weights: {numa_fit: 8}}\n")
            await eventually(lambda: applied() == 1, what="the scheduling change")
            assert "restart" not in caplog.text
            path.write_text(HEAD + ELECTION % 20 + "scheduling: {weights: {numa_fit: 8}}\n")
            await eventually(lambda: applied() == 2, what="the election change")
    restarts = [r.getMessage() for r in caplog.records if "restart" in r.getMessage()]
    assert len(restarts) == 1
    assert "leaderElection.leaseDurationSeconds changed; restart" in restarts[0]
    assert "identity" not in restarts[0]
