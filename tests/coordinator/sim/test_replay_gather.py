"""Gathering on the production engine (the replay): two NVL72-style racks of four trays, each
with two whole trays free — rack 1's other two trays hold two movable 4-GPU services (a
ReplicaSet's), rack 2's two pods no controller owns. A 4-tray gang fits only split over both
racks. With defragmentation on, the engine moves the two services out of rack 1 and the gang runs
inside it; with it off, or with gathering alone off (``defragmentation.gather: false``), the
gang runs split over the two racks. Gathering is counted as the moves it is, never as a
preemption attempt (the gang could run)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from coordinator.core.preemption.defrag import DefragSettings
from coordinator.engine.gangs.service import GangSettings
from coordinator.engine.observer import SchedulingObserver, Trigger
from coordinator.forecast.engine import EngineSettings
from coordinator.sim import Job, RunResult, Simulator, make_policy
from coordinator.sim.replay import ReplaySettings
from tests.support.sim_cluster import racks_of, two_nvl72_racks

HOUR = 3600.0


def _jobs() -> list[Job]:
    return [
        # rack 2 and the HGX node taken while the services arrive, so that they land in rack 1
        *(Job(job_id=f"fill-r2-00{i}", arrival_s=0, duration_s=30, gpus=4) for i in (1, 2, 3, 4)),
        Job(job_id="fill-hgx-001", arrival_s=0, duration_s=10 * HOUR, gpus=8),
        Job(job_id="svc-a", arrival_s=10, duration_s=10 * HOUR, gpus=4),
        Job(job_id="svc-b", arrival_s=11, duration_s=10 * HOUR, gpus=4),
        # two of rack 2's trays held for good once the fill has left
        *(Job(job_id=f"hold-r2-00{i}", arrival_s=60, duration_s=10 * HOUR, gpus=4) for i in (1, 2)),
        Job(job_id="train", arrival_s=120, duration_s=HOUR, gpus=4, gang_size=4),
    ]


def _prepare(sim: Simulator) -> None:
    """``fill-*`` and ``hold-*`` pods pinned to their node by name and owned by nothing; the
    services a ReplicaSet's (movable)."""
    out: list[list[dict[str, Any]]] = []
    for job, manifests in zip(sim.jobs, sim.manifests, strict=True):
        changed = []
        for m in manifests:
            meta, spec = dict(m["metadata"]), dict(m["spec"])
            if job.job_id.startswith(("fill-", "hold-")):
                node = job.job_id.split("-", 1)[1]
                spec["nodeSelector"] = {"kubernetes.io/hostname": node}
            elif job.job_id.startswith("svc-"):
                ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "svc", "uid": "rs"}
                meta["ownerReferences"] = [{**ref, "controller": True}]
            changed.append({**m, "metadata": meta, "spec": spec})
        out.append(changed)
    sim.manifests = tuple(out)


def _replay(mode: str, *, gather: bool = True) -> RunResult:
    # the services' work is cheap here
    defrag = DefragSettings(mode=mode, max_loss_ratio=10.0, gather=gather)
    settings = ReplaySettings(engine=EngineSettings(gangs=GangSettings(defrag=defrag)))
    sim = Simulator(two_nvl72_racks(hgx=1), _jobs(), settings=settings)
    _prepare(sim)
    return sim.run(make_policy("topos"))


@pytest.fixture
def told(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """What the engine tells its observer (the replay's is the base class): preemptions
    attempted, moves attempted and made by trigger, pods moved by trigger."""
    seen: Counter[str] = Counter()

    def attempted(self: SchedulingObserver) -> None:
        seen["preemption"] += 1

    def defrag(self: SchedulingObserver, trigger: Trigger) -> None:
        seen[f"attempt:{trigger}"] += 1

    def moved(self: SchedulingObserver, trigger: Trigger, pods: int) -> None:
        seen[f"moves:{trigger}"] += 1
        seen[f"pods:{trigger}"] += pods

    monkeypatch.setattr(SchedulingObserver, "preemption_attempted", attempted)
    monkeypatch.setattr(SchedulingObserver, "defragmentation_attempted", defrag)
    monkeypatch.setattr(SchedulingObserver, "moved", moved)
    return seen


def test_a_gang_that_would_be_split_is_gathered_into_one_rack_by_moving_services(
    told: Counter[str],
) -> None:
    result = _replay("onDemand")
    # one gathering, told as such: no preemption was attempted (nothing waited)
    assert told == {"attempt:gather": 1, "moves:gather": 1, "pods:gather": 2}
    assert racks_of(result, "train") == {"r1"}
    moved = [o for o in result.interrupted if o.job.job_id.startswith("svc-")]
    assert len(moved) == 2  # both services ran in rack 1, were moved, and started again
    assert all(node.startswith("r1-") for o in moved for node in o.nodes)
    assert racks_of(result, "svc-a") == racks_of(result, "svc-b") == {"r2"}
    assert result.defrags == 1


def test_without_defragmentation_the_gang_runs_split() -> None:
    result = _replay("off")
    assert racks_of(result, "train") == {"r1", "r2"}
    assert result.defrags == 0
    assert not result.interrupted


def test_with_gathering_off_the_gang_runs_split_though_defragmentation_is_on(
    told: Counter[str],
) -> None:
    result = _replay("onDemand", gather=False)
    assert not told
    assert racks_of(result, "train") == {"r1", "r2"}
    assert result.defrags == 0
    assert not result.interrupted
