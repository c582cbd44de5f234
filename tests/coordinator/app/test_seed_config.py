"""The seed systems' configuration objects, written as their authors wrote them, are accepted by
the coordinator's file (whole, or as its ``scheduling`` section); a key Topos does not know is
refused with its path; and a changed file is applied while the coordinator runs — a broken one
is refused and the old settings keep running. A failed bind counts against its node's history,
so the retry goes elsewhere."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.wire import GpuState
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.api.keys import METRICS
from coordinator.app.config.load import ConfigError, load_file, parse_config
from coordinator.app.config.sections import Config
from coordinator.app.main import running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.app.reload import restart_needed
from coordinator.app.scheduler import RUNNING
from coordinator.core.plugins.noderesources import NodeResourcesFitArgs
from coordinator.engine.ports import ClusterError, PodRef
from coordinator.inventory.store import Inventory
from devcluster.pods import gang_members, gpu_pod
from tests.support.metrics_coordinator import bound, two_leaf_cluster
from tests.support.polling import eventually

SEED_003 = """
apiVersion: topology.scheduler/v1alpha1
kind: SchedulerConfig
metadata:
  name: topology-scheduler-config
spec:
  scoringWeights:
    resourceAvailability: 0.4
    topologyAlignment: 0.3
    domainUtilization: 0.2
    historicalPerformance: 0.1
  topologyConstraints:
    maxNodesPerLeaf: 4
    maxGPUsPerLeaf: 32
"""

KUBENEXUS = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: kubenexus-scheduler
    plugins:
      queueSort: {enabled: [{name: Coscheduling}]}
      preFilter: {enabled: [{name: Coscheduling}]}
      permit: {enabled: [{name: Coscheduling}]}
      reserve: {enabled: [{name: Coscheduling}]}
      score: {enabled: [{name: NUMATopology, weight: 10}]}
"""


def test_a_seed_003_scheduler_config_is_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(SEED_003)
    scheduling = load_file(str(path)).scheduling
    assert scheduling.weights["GpuPacking"] == 8  # 0.4 of 20
    assert scheduling.weights["DomainUtilisation"] == 4
    assert scheduling.topology_constraints.max_nodes_per_leaf == 4
    assert scheduling.topology_constraints.max_gpus_per_leaf == 32


def test_a_seed_object_may_also_be_the_scheduling_section() -> None:
    inside = parse_config({"scheduling": yaml.safe_load(SEED_003)}).scheduling
    assert inside == load_file_text(SEED_003).scheduling


def load_file_text(text: str) -> Config:
    return parse_config(yaml.safe_load(text))


def test_kubenexus_kube_scheduler_configuration_is_read() -> None:
    scheduling = load_file_text(KUBENEXUS).scheduling
    assert scheduling.scheduler_name == "kubenexus-scheduler"
    assert scheduling.weights["NumaTopology"] == 10


def test_neuronetes_scoring_factors_and_fast_scheduling_are_read() -> None:
    scheduling = parse_config(
        {
            "scheduling": {
                "scoringWeights": {
                    "gpuAvailability": "30%",
                    "topologyFitness": "25%",
                    "modelCachePresence": "20%",
                    "costEfficiency": "15%",
                    "dataLocality": "10%",
                },
                "fastScheduling": {"enabled": True, "maxNodesToScore": 50},
            }
        }
    ).scheduling
    w = scheduling.weights
    assert (w["GpuPacking"], w["GpuTopology"], w["NodeAffinity"], w["InterPodAffinity"]) == (
        6,
        5,
        7,  # a node's cache and its price are both node-label preferences
        2,
    )
    assert scheduling.nodes_to_score(1000) == 50


def rejected(doc: object) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(doc, source="/etc/topos/config.yaml")
    return str(caught.value)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"scheduling": {"scoringWeights": {"resourceAvailabilty": 0.4}}},
            "scoringWeights.resourceAvailabilty: unknown factor — did you mean "
            "'resourceAvailability'?",
        ),
        (
            {"scheduling": {"scoringWeights": {"topologyAlignment": -1}}},
            "scoringWeights.topologyAlignment: must be a number of at least 0",
        ),
        (
            {"scheduling": {"topologyConstraints": {"maxNodesPerLef": 4}}},
            "topologyConstraints.maxNodesPerLef: unknown key — did you mean 'maxNodesPerLeaf'?",
        ),
        (
            {"scheduling": {"topologyConstraints": {"maxGPUsPerLeaf": 0}}},
            "topologyConstraints.maxGPUsPerLeaf: must be a whole number of at least 1",
        ),
        (
            {"apiVersion": "topology.scheduler/v1alpha1", "kind": "SchedulerConfig", "sepc": {}},
            "sepc: unknown key in a SchedulerConfig — did you mean 'spec'?",
        ),
        ({"kind": "Deployment"}, "kind: 'Deployment' is not a scheduler configuration"),
        (
            {"apiVersion": "kubescheduler.config.k8s.io/v2", "kind": "KubeSchedulerConfiguration"},
            "apiVersion: 'kubescheduler.config.k8s.io/v2' is not a version of "
            "KubeSchedulerConfiguration",
        ),
        (
            {
                "kind": "KubeSchedulerConfiguration",
                "profiles": [{"plugins": {"score": {"enabled": [{"name": "NUMATopolgy"}]}}}],
            },
            "profiles[0].plugins.score.enabled[0].name: unknown plugin 'NUMATopolgy' — "
            "did you mean 'NUMATopology'?",
        ),
        (
            {
                "kind": "KubeSchedulerConfiguration",
                "profiles": [{"plugins": {"preFilter": {"disabled": [{"name": "Coscheduling"}]}}}],
            },
            "profiles[0].plugins.preFilter.disabled[0].name: Coscheduling is built into Topos",
        ),
        (
            {
                "kind": "KubeSchedulerConfiguration",
                "profiles": [
                    {
                        "pluginConfig": [
                            {"name": "NodeResourcesFit", "args": {"scoringStrategi": {}}}
                        ]
                    }
                ],
            },
            "profiles[0].pluginConfig[0].args.scoringStrategi: unknown key — did you mean "
            "'scoringStrategy'?",
        ),
        (
            {"kind": "KubeSchedulerConfiguration", "profiles": [{}, {}]},
            "profiles[0].schedulerName: each of several profiles needs its own name",
        ),
        (
            {
                "kind": "KubeSchedulerConfiguration",
                "profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}],
            },
            "profiles[1].schedulerName: 'a' is already the name of profiles[0]",
        ),
        (
            {"kind": "KubeSchedulerConfiguration", "clientConnection": {}},
            "clientConnection: unknown key in a KubeSchedulerConfiguration",
        ),
    ],
)
def test_a_seed_key_topos_does_not_know_is_refused_by_its_path(doc: object, message: str) -> None:
    assert message in rejected(doc)


def test_a_plugin_nothing_registered_is_refused_at_start() -> None:
    config = parse_config({"scheduling": {"enabled_plugins": ["PowerDraw"]}})
    with pytest.raises(ConfigError, match="enabled_plugins: unknown plugin 'PowerDraw'"):
        wire(config, MemoryBackend(MemoryCluster(Inventory())))


def test_a_profiles_scoring_strategy_reaches_node_resources_fit() -> None:
    scheduling = parse_config(
        {
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "pluginConfig": [
                        {
                            "name": "NodeResourcesFit",
                            "args": {"scoringStrategy": {"type": "MostAllocated"}},
                        }
                    ]
                }
            ],
        }
    ).scheduling
    fit = scheduling.args["NodeResourcesFit"]
    assert isinstance(fit, NodeResourcesFitArgs)
    assert fit.scoring_strategy.type == "MostAllocated"


def test_keys_that_need_a_restart_are_named() -> None:
    old = parse_config({"coordinator": {"listen": "0.0.0.0:8080"}})
    new = parse_config({"coordinator": {"listen": "0.0.0.0:9090"}, "gangs": {"backoffSeconds": 3}})
    assert restart_needed(old, new) == ["coordinator.listen", "gangs.backoffSeconds"]
    renamed = load_file_text(KUBENEXUS)
    assert restart_needed(old, renamed) == ["scheduling.profiles[0].schedulerName"]
    weights_only = parse_config({"scheduling": {"weights": {"numa_fit": 9}}})
    assert restart_needed(old, weights_only) == []


async def test_a_changed_file_is_applied_and_a_broken_one_keeps_the_old(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("coordinator: {reloadIntervalSeconds: 0.05}\n" + "scheduling: {}\n")
    config = load_file(str(path))
    app = wire(config, MemoryBackend(MemoryCluster(Inventory())), config_path=str(path))
    registry = app[METRICS].registry

    def count(result: str) -> float:
        return registry.get_sample_value("topos_config_reloads_total", {"result": result}) or 0

    async with running(app):
        runtime = app[RUNNING].runtime
        assert runtime is not None
        scheduler = runtime.scheduler
        before = scheduler.framework
        assert before.config.topology_constraints.max_nodes_per_leaf is None
        path.write_text(
            "coordinator: {reloadIntervalSeconds: 0.05}\nscheduling:\n"
            + "\n".join("  " + line for line in SEED_003.strip().splitlines())
            + "\n"
        )
        await eventually(lambda: scheduler.framework is not before, what="the reload")
        applied = scheduler.framework
        assert applied.config.topology_constraints.max_nodes_per_leaf == 4
        assert {p.name: w for p, w in applied.score}["DomainUtilisation"] == 4
        assert count("applied") >= 1
        with caplog.at_level(logging.WARNING, logger="coordinator.app.reload"):
            path.write_text(
                "coordinator: {reloadIntervalSeconds: 0.05}\n"
                "scheduling: {scoringWeights: {resourceAvailabilty: 1}}\n"
            )
            await eventually(lambda: count("refused") == 1, what="the reload")
            path.write_text(
                "coordinator: {reloadIntervalSeconds: 0.05}\n"
                "scheduling: {enabled_plugins: [PowerDraw]}\n"
            )
            await eventually(lambda: count("refused") == 2, what="the reload")
            assert "enabled_plugins: unknown plugin 'PowerDraw'" in caplog.text
            assert scheduler.framework is applied  # the old settings keep running
            assert "scoringWeights.resourceAvailabilty" in caplog.text
            assert "previous settings keep running" in caplog.text
            path.write_text(
                "coordinator: {reloadIntervalSeconds: 0.05, listen: '0.0.0.0:9999'}\n"
                "scheduling: {weights: {numa_fit: 9}}\n"
            )
            await eventually(
                lambda: scheduler.framework.config.weights["NumaTopology"] == 9, what="the reload"
            )
            assert "coordinator.listen changed; restart the coordinator" in caplog.text


async def test_a_failed_bind_steers_the_retry_to_another_leaf() -> None:
    cluster = two_leaf_cluster()  # n1 in leaf-1, n2 in leaf-2, alike: n1 wins a tie
    real_bind = cluster.bind
    failed: list[str] = []

    async def bind_failing_once_on_n1(pod: PodRef, node: str, annotations: Any) -> None:
        if node == "n1" and not failed:
            failed.append(pod.key)
            raise ClusterError("the API server timed out")
        await real_bind(pod, node, annotations)

    cluster.bind = bind_failing_once_on_n1  # type: ignore[method-assign]
    config = parse_config(
        {"scheduling": {"scoringWeights": {"historicalPerformance": 0.9, "topologyAlignment": 0.1}}}
    )
    app = wire(config, MemoryBackend(cluster))
    async with running(app):
        cluster.create_pod(gpu_pod("retry", 1, namespace="default"))
        node = await eventually(lambda: bound(cluster).get("retry"), what="the retry bound")
    assert failed == ["default/retry"]
    assert node == "n2"  # the history of n1 (and its leaf) counted against it


async def test_a_gang_recovery_counts_against_the_failed_node() -> None:
    cluster = two_leaf_cluster()
    app = wire(Config(), MemoryBackend(cluster))
    async with running(app):
        for member in gang_members("train", 2, prefix="w", gpus=8, namespace="default"):
            cluster.create_pod(member)
        await eventually(lambda: len(bound(cluster)) == 2, what="the gang bound")
        pod_obj = cluster.pod("default", "w-0")
        assert pod_obj is not None
        node = pod_obj["spec"]["nodeName"]
        uuid = pod_obj["metadata"]["annotations"]["topos.io/assigned-gpus"].split(",")[0]
        inventory = cluster.inventory
        state = inventory.node(node)
        assert state is not None
        assert state.topology is not None
        index = next(g.index for g in state.topology.gpus if g.uuid == uuid)
        history = app[RUNNING].history
        assert history is not None
        assert history.weights() == {}
        inventory.apply_delta(
            node,
            seq=1,
            gpus=(GpuState(index=index, uuid=uuid, healthy=False, health_reason="XID 79"),),
            allocations=None,
        )
        weights = await eventually(history.weights, what="the recovery remembered")
    assert set(weights) == {node}
