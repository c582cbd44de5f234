"""``topos devcluster up --workloads`` as a user runs it: the four workload controllers start with
the playground, their examples' pods are made by them, placed by Topos and run on the simulated
nodes (KWOK), and ``down`` stops the controllers with the rest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devcluster.processes import alive, port_in_use
from devcluster.workloads.catalog import WORKLOAD_CONTROLLERS
from tests.support.workload_examples import lws_sample, paralleljobs
from tests.support.workload_playground import Playground, topos, workload_playground

pytestmark = pytest.mark.kube

WAIT = "--timeout=180s"


@pytest.fixture(scope="module")
def playground(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Playground]:
    directory = tmp_path_factory.mktemp("playground-workloads") / "dc"
    with workload_playground(directory, "--workloads", WORKLOAD_CONTROLLERS) as started:
        yield started


def test_up_starts_the_four_controllers_and_says_so(playground: Playground) -> None:
    running = playground.controllers()
    assert [p.name for p in running] == ["jobset", "lws", "trainer", "kuberay"]
    assert all(alive(p.pid) for p in running)
    assert "workload controllers jobset v0.10.1, lws v0.7.0, trainer v2.0.0, kuberay v1.5.0" in (
        playground.stderr
    )
    crds = playground.kubectl("get", "crd", "-o", "name")
    for name in ("jobsets.jobset.x-k8s.io", "leaderworkersets.leaderworkerset.x-k8s.io"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{name}" in crds
    for name in ("trainjobs.trainer.kubeflow.org", "rayclusters.ray.io"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{name}" in crds
    assert "torch-distributed" in playground.kubectl("get", "clustertrainingruntimes", "-o", "name")


def test_a_jobsets_pods_are_made_placed_and_run(playground: Playground) -> None:
    playground.apply(paralleljobs())
    jobs = ("job/paralleljobs-workers-0", "job/paralleljobs-driver-0")
    playground.kubectl("wait", "--for=create", *jobs, WAIT)
    playground.kubectl("wait", "--for=jsonpath={.status.active}=4", jobs[0], WAIT)
    playground.kubectl("wait", "--for=jsonpath={.status.active}=1", jobs[1], WAIT)
    selector = "jobset.sigs.k8s.io/jobset-name=paralleljobs"
    playground.kubectl("wait", "--for=condition=Ready", "pod", "-l", selector, WAIT)
    pods = playground.pods(selector)
    states = {
        p["metadata"]["name"]: (p["spec"].get("nodeName"), p["status"]["phase"]) for p in pods
    }
    assert len(states) == 5, states
    assert all(node and phase == "Running" for node, phase in states.values()), states


def test_an_lws_samples_groups_all_become_ready(playground: Playground) -> None:
    playground.apply(lws_sample())
    name = "leaderworkerset/leaderworkerset-sample"
    # Not condition Available: with the sample's maxUnavailable: 1 that holds at 2 groups of 3.
    playground.kubectl("wait", "--for=jsonpath={.status.readyReplicas}=3", name, WAIT)
    # LWS counts a group ready once its leader is Ready and its workers exist
    # (pkg/utils/statefulset.StatefulsetReady), not once they run.
    selector = "leaderworkerset.sigs.k8s.io/name=leaderworkerset-sample"
    playground.kubectl("wait", "--for=condition=Ready", "pod", "-l", selector, WAIT)
    pods = playground.pods(selector)
    states = {
        p["metadata"]["name"]: (p["spec"].get("nodeName"), p["status"]["phase"]) for p in pods
    }
    assert len(states) == 12, states
    assert all(node and phase == "Running" for node, phase in states.values()), states


def test_down_stops_the_controllers_too(playground: Playground) -> None:
    running = playground.controllers()
    down = topos("devcluster", "down", "--dir", str(playground.directory))
    assert down.returncode == 0, down.stderr
    assert [p.name for p in running if alive(p.pid)] == []
    ports = [port for p in running for port in (p.health_port, p.webhook_port)]
    assert [port for port in ports if port_in_use(port)] == []
    assert not playground.directory.exists()
