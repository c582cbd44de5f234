"""The coordinator's configuration file as an operator meets it: one typed tree, read once, where a
misspelt section or key, a value of the wrong type or an inconsistent section stops
``topos coordinator`` with one line naming the key's path and the file; the shipped ConfigMap's
file is accepted; and the tree's sections reach the components that read them."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.app.config.load import ConfigError, load_file, parse_config
from coordinator.app.config.sections import Config
from coordinator.app.main import running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.app.scheduler import RUNNING
from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.plugins.packingmode import PackingArgs
from coordinator.core.registry import weights_of
from coordinator.inventory.state import NodeState
from coordinator.inventory.store import Inventory

ROOT = Path(__file__).resolve().parents[3]
TOPOS = [sys.executable, "-m", "cli.main"]


def shipped_config() -> str:
    """``config.yaml`` of the ConfigMap in ``deploy/coordinator-config.yaml``."""
    configmap = yaml.safe_load((ROOT / "deploy" / "coordinator-config.yaml").read_text())
    text: str = configmap["data"]["config.yaml"]
    return text


def rejected(doc: object) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(doc, source="/etc/topos/config.yaml")
    return str(caught.value)


# --- as a user runs it ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "args", "message"),
    [
        (
            "schedulng:\n  packing: spread\n",
            (),
            "unknown section 'schedulng' in {file} — did you mean 'scheduling'?",
        ),
        (
            "auth:\n  openReadonly: true\n",
            (),
            "unknown key 'auth.openReadonly' in {file} — did you mean 'auth.openReadOnly'?",
        ),
        (
            "limits:\n  burst: lots\n",
            (),
            "'limits.burst' in {file}: expected an integer, got a string",
        ),
        ("coordinator: [1, 2\n", (), "config {file} is not valid YAML: "),
        ("auth:\n  enabled: true\n", ("--in-memory",), "config: auth.enabled needs an API server"),
        ("", ("--listen", "8080"), "--listen: expected HOST:PORT, e.g. 0.0.0.0:8080, not '8080'"),
    ],
)
def test_a_bad_config_stops_the_coordinator_with_one_line(
    tmp_path: Path, text: str, args: tuple[str, ...], message: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    proc = subprocess.run(
        [*TOPOS, "coordinator", "--config", str(config), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("topos: " + message.format(file=config))


def test_the_shipped_config_gets_past_parsing_to_its_certificate(tmp_path: Path) -> None:
    """Outside a pod the shipped file is valid; what is missing is the mounted Secret."""
    config = tmp_path / "config.yaml"
    config.write_text(shipped_config())
    proc = subprocess.run(
        [*TOPOS, "coordinator", "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("topos: config: tls: ")
    assert "/etc/topos/tls/tls.crt" in line


def test_the_shipped_config_parses_into_the_tree() -> None:
    config = parse_config(yaml.safe_load(shipped_config()))
    assert config.coordinator.address == ("0.0.0.0", 8443)
    assert config.coordinator.stale_ttl_s == 30
    assert config.tls.cert_file == "/etc/topos/tls/tls.crt"
    assert config.auth is not None
    assert config.auth.open_read_only
    assert config.leader_election is not None
    assert config.leader_election.lease_duration_s == 15
    assert config.limits.max_body_bytes == 4194304
    assert weights_of(config.scheduling)["GpuTopology"] == 5


# --- unknown sections and keys -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"schedulng": {}}, "unknown section 'schedulng' in F — did you mean 'scheduling'?"),
        ({"leaderelection": {}}, "unknown section 'leaderelection' in F — did you mean"),
        ({"coordinator": {"staleTTLSeconds": 5}}, "did you mean 'coordinator.staleTtlSeconds'?"),
        ({"tls": {"cert": "a"}}, "unknown key 'tls.cert' in F — did you mean 'tls.certFile'?"),
        ({"limits": {"ratePerSec": 5}}, "did you mean 'limits.ratePerSecond'?"),
        ({"scheduler": {"nodeselector": {}}}, "did you mean 'scheduler.nodeSelector'?"),
        ({"kube": {"qpz": 5}}, "unknown key 'kube.qpz' in F — did you mean 'kube.qps'?"),
        ({"gangs": {"domainKeys": {"lef": "x"}}}, "did you mean 'gangs.domainKeys.leaf'?"),
        ({"leaderElection": {"leaseDuration": 5}}, "'leaderElection.leaseDurationSeconds'?"),
    ],
)
def test_a_misspelt_name_is_refused_with_the_close_match(doc: object, message: str) -> None:
    assert message in rejected(doc).replace("/etc/topos/config.yaml", "F")


def test_a_name_like_nothing_known_lists_what_is_known() -> None:
    assert rejected({"colour": "blue"}) == (
        "unknown section 'colour' in /etc/topos/config.yaml (expected one of: auth, coordinator, "
        "defragmentation, gangs, health, kube, leaderElection, limits, metrics, neuronetes, "
        "scheduler, scheduling, tls)"
    )


# --- wrong types and inconsistent sections --------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"limits": {"burst": 2.5}}, "'limits.burst' in F: expected an integer, got a number"),
        ({"auth": "yes"}, "'auth' in F: expected a mapping, got a string"),
        ({"auth": {"audiences": "api"}}, "'auth.audiences' in F: expected a list, got a string"),
        ({"scheduler": {"enabled": "no"}}, "'scheduler.enabled' in F: expected true or false"),
        ({"scheduler": {"maxBindsInFlight": 0}}, "'scheduler.maxBindsInFlight' in F: expected an"),
        ({"coordinator": {"staleTtlSeconds": 0}}, "'coordinator.staleTtlSeconds' in F: expected a"),
        ({"coordinator": {"listen": "8443"}}, "'coordinator.listen' in F: expected HOST:PORT"),
        ({"tls": {"certFile": "/x.crt"}}, "'tls' in F: certFile and keyFile go together"),
        ({"limits": {"burst": 0}}, "'limits' in F: limits.burst and limits.maxClients must be"),
        ({"leaderElection": {"leaseDurationSeconds": 1}}, "'leaderElection' in F: leaseDuration"),
        ({"gangs": {"backoffSeconds": -1}}, "'gangs.backoffSeconds' in F: expected a number > 0"),
        ({"kube": {"qps": float("inf")}}, "'kube.qps' in F: expected a finite number, got .inf"),
        (["coordinator"], "F: expected a mapping of sections at the top level"),
    ],
)
def test_a_bad_value_names_its_path_and_what_was_expected(doc: object, message: str) -> None:
    assert rejected(doc).replace("/etc/topos/config.yaml", "F").startswith(message)


@pytest.mark.parametrize(
    ("scheduling", "message"),
    [
        ({"weights": {"numa_fit": -1}}, "weights.numa_fit: must be an integer from 0 to 100"),
        ({"packing": "tight"}, "packing: unknown mode 'tight' (expected binpack or spread)"),
        ({"wieghts": {}}, "wieghts: unknown key — did you mean 'weights'?"),
        (
            {"fastScheduling": {"enabled": True, "maxNodesToScore": 0}},
            "fastScheduling.maxNodesToScore: must be a whole number of at least 1",
        ),
        (
            {"percentageOfNodesToScore": 150},
            "percentageOfNodesToScore: must be from 0 to 100 (0: kube's adaptive rule), not 150",
        ),
    ],
)
def test_the_scheduling_section_keeps_its_own_messages(scheduling: object, message: str) -> None:
    assert rejected({"scheduling": scheduling}) == (
        f"'scheduling' in /etc/topos/config.yaml: {message}"
    )


def test_the_seeds_fast_scheduling_and_kubes_percentage_are_accepted() -> None:
    text = """
scheduling:
  percentageOfNodesToScore: 100
  fastScheduling:
    enabled: true
    maxNodesToScore: 50
"""
    scheduling = parse_config(yaml.safe_load(text)).scheduling
    assert scheduling.percentage_of_nodes_to_score == 100
    assert scheduling.fast_scheduling.enabled
    assert scheduling.nodes_to_score(5000) == 50


def test_the_file_itself_is_named_when_it_cannot_be_read(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=re.escape(f"cannot read config {missing}")):
        load_file(str(missing))


# --- what the tree holds -------------------------------------------------------------------------


def test_no_file_an_empty_file_and_empty_sections_are_the_defaults(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    sections = tmp_path / "sections.yaml"
    sections.write_text("coordinator:\ntls:\nauth:\nscheduler:\nscheduling:\n")
    assert load_file(None) == load_file(str(empty)) == load_file(str(sections)) == Config()
    # The defaults: one profile, topos, and the AgentPool profile (docs/scheduling.md#profiles).
    default = Config().scheduling
    assert dataclasses.replace(default, other_profiles=()) == SchedulerConfig()
    assert [p.scheduler_name for p in default.other_profiles] == ["topos-agentpools"]


def _node(name: str, **labels: str) -> NodeState:
    return NodeState(name=name, stale=False, connected=True, schedulable=True, labels=labels)


def test_sections_arrive_typed() -> None:
    config = parse_config(
        {
            "coordinator": {"listen": "[::1]:9000", "staleTtlSeconds": 8},
            "scheduler": {"namespace": "ml", "nodeSelector": {"pool": "gpu"}},
            "kube": {"qps": 0},
            "gangs": {"backoffSeconds": 3, "domainKeys": {"leaf": "rack"}},
            "scheduling": {"packing": "spread"},
        }
    )
    assert config.coordinator.address == ("::1", 9000)
    assert config.coordinator.sweep_every_s == 2.0
    node_filter = config.scheduler.node_filter()
    assert node_filter is not None
    assert node_filter(_node("a", pool="gpu"))
    assert not node_filter(_node("b", pool="cpu"))
    assert config.kube.rate_limit is None  # qps 0: no client-side limit
    gangs = config.gangs.settings()
    assert (gangs.backoff_s, gangs.keys.leaf, gangs.keys.spine) == (3.0, "rack", "topos.io/spine")
    # ``packing`` is the argument of both scorers that pack or spread
    spread = PackingArgs("spread")
    assert config.scheduling.args["GpuPacking"] == config.scheduling.args["DomainUtilisation"]
    assert config.scheduling.args["GpuPacking"] == spread


# --- one wiring -----------------------------------------------------------------------------------


@pytest.mark.parametrize("enabled", [True, False])
async def test_the_scheduler_section_decides_whether_the_loop_runs(enabled: bool) -> None:
    config = parse_config({"scheduler": {"enabled": enabled}})
    app = wire(config, MemoryBackend(MemoryCluster(Inventory())))
    async with running(app):
        assert (app[RUNNING].runtime is not None) is enabled
    assert app[RUNNING].runtime is None


def test_an_in_memory_backend_serves_its_own_clusters_inventory() -> None:
    cluster = MemoryCluster(Inventory())
    with pytest.raises(ValueError, match="its own cluster's inventory"):
        wire(Config(), MemoryBackend(cluster), inventory=Inventory())
