"""Leader election settings and the Lease's wire form: what operators write in the ConfigMap's
``leaderElection`` section and what other Kubernetes tools (kubectl, client-go electors) read from
the Lease."""

from __future__ import annotations

import datetime as dt

import pytest

from coordinator.adapters.kube.lease import (
    LeaseRecord,
    LeaseStore,
    lease_from_record,
    record_from_lease,
)
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.app.config.load import ConfigError, parse_config
from coordinator.app.config.sections import Config
from coordinator.app.election import LeaderElectionSettings, LeaderElector
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.leadership import LEADER
from coordinator.app.main import wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.inventory.store import Inventory

_NO_STORE: LeaseStore = None  # type: ignore[assignment]  # never reached: nothing campaigns


def test_defaults_match_client_go_and_are_consistent() -> None:
    s = LeaderElectionSettings(identity="a")
    assert (s.lease_duration_s, s.renew_deadline_s, s.retry_period_s) == (15.0, 10.0, 2.0)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"leaseDurationSeconds": 5, "renewDeadlineSeconds": 5}, "must exceed renewDeadline"),
        ({"renewDeadlineSeconds": 2, "retryPeriodSeconds": 2}, "must exceed 1.2 x retryPeriod"),
        ({"retryPeriodSeconds": 0}, "retryPeriodSeconds must be positive"),
        (
            {"retryPeriodSeconds": "2s"},
            "'leaderElection.retryPeriodSeconds' in F: expected a number",
        ),
        ({"leaseDuration": 15}, "did you mean 'leaderElection.leaseDurationSeconds'?"),
        ({"identity": ""}, "'leaderElection.identity' in F: must not be empty"),
    ],
)
def test_bad_settings_are_refused_with_a_clear_message(
    raw: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_config({"leaderElection": raw}, source="F")


def test_settings_from_configmap_section() -> None:
    s = parse_config(
        {
            "leaderElection": {
                "leaseName": "x",
                "namespace": "ns",
                "leaseDurationSeconds": 30,
                "renewDeadlineSeconds": 20,
            }
        }
    ).leader_election
    assert s is not None
    assert (s.lease_name, s.namespace, s.lease_duration_s, s.renew_deadline_s) == (
        "x",
        "ns",
        30.0,
        20.0,
    )
    assert s.identity is None  # unset: each elector makes one up, once, unique per process
    one, other = (LeaderElector(_NO_STORE, s) for _ in range(2))
    assert one.identity
    assert other.identity
    assert one.identity != other.identity
    assert one.identity == one.identity
    assert parse_config({}).leader_election is None  # no section: wire() chooses (below)


def test_without_a_section_coordinators_on_an_api_server_elect_a_leader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    app = wire(Config(), KubeBackend("/nonexistent/kubeconfig"))  # nothing connects until start
    elector = app[LEADER]
    assert elector.settings.enabled
    assert (elector.settings.namespace, elector.settings.lease_name) == (
        "default",
        "topos-coordinator",
    )
    assert not elector.is_leader()  # not before it holds the Lease
    monkeypatch.setenv("POD_NAMESPACE", "topos-system")  # in a pod: the Lease sits beside it
    assert LeaderElectionSettings().namespace == "topos-system"
    # a coordinator that never binds (API only) does not take the Lease from one that does
    api_only = parse_config({"scheduler": {"enabled": False}})
    assert not wire(api_only, KubeBackend("/nonexistent/kubeconfig"))[LEADER].settings.enabled


def test_election_turned_off_leads_at_once_and_in_memory_never_elects() -> None:
    off = parse_config({"leaderElection": {"enabled": False}})
    assert wire(off, KubeBackend("/nonexistent/kubeconfig"))[LEADER].is_leader()
    in_memory = MemoryBackend(MemoryCluster(Inventory()))
    assert wire(Config(), in_memory)[LEADER].is_leader()
    with pytest.raises(ConfigError, match=r"leaderElection\.enabled needs an API server"):
        wire(parse_config({"leaderElection": {}}), MemoryBackend(MemoryCluster(Inventory())))


def test_lease_round_trip_uses_micro_time_and_keeps_the_version() -> None:
    when = dt.datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)
    record = LeaseRecord(
        holder="pod-a_1",
        lease_duration_s=15,
        acquire_time=when,
        renew_time=when,
        transitions=3,
        resource_version="42",
    )
    obj = lease_from_record(record, name="topos-coordinator", namespace="topos-system")
    assert obj["spec"]["renewTime"] == "2025-03-01T12:00:00.123456Z"
    assert obj["metadata"]["resourceVersion"] == "42"
    assert record_from_lease(obj) == record


def test_a_released_or_foreign_lease_reads_safely() -> None:
    released = record_from_lease(
        {
            "metadata": {"resourceVersion": "7"},
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 1},
        }
    )
    assert released.is_free
    garbage = record_from_lease(
        {"spec": {"leaseDurationSeconds": -4, "renewTime": "yesterday", "leaseTransitions": "x"}}
    )
    assert garbage == LeaseRecord(holder=None, lease_duration_s=1)
