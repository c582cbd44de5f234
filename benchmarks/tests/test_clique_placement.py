"""The NVLink clique benchmark through the production engine, on a short stream: the clique tier
keeps every gang that could fit one rack inside one, the clique-blind planner does not, and
every arm runs every job."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from benchmarks.clique_bound import RackWork
from benchmarks.clique_placement import (
    RACK_CAUSES,
    TICK_S,
    blind_base,
    by_seed,
    defrag_settings,
    engine_run,
    main,
    stranded_causes,
    stream,
    trace,
)


def test_the_stream_becomes_a_trace_of_the_same_jobs() -> None:
    jobs = stream(11, 20, 0.45)
    rows = trace(jobs)
    assert [r.job_id for r in rows] == [j.name for j in jobs]
    gang = next(r for r, j in zip(rows, jobs, strict=True) if j.trays)
    assert (gang.gang_size, gang.gpus) == (next(j.trays for j in jobs if j.trays), 4)
    assert {r.gpus for r, j in zip(rows, jobs, strict=True) if not j.trays} <= {0, 1, 2, 3, 4}


def test_a_jittered_trace_holds_the_same_jobs_each_up_to_a_second_late() -> None:
    jobs = stream(11, 30, 0.45)
    plain, late = trace(jobs), trace(jobs, jitter=1)
    assert [r.arrival_s for r in plain] == [j.arrive * TICK_S for j in jobs]
    offsets = [b.arrival_s - a.arrival_s for a, b in zip(plain, late, strict=True)]
    assert all(0 <= o < 1 for o in offsets)
    assert len(set(offsets)) > len(jobs) // 2  # each job its own offset, not one shift
    assert [(r.job_id, r.duration_s, r.gpus, r.gang_size) for r in late] == [
        (r.job_id, r.duration_s, r.gpus, r.gang_size) for r in plain
    ]
    assert trace(jobs, jitter=1) == late  # seeded: every arm replays the same arrivals
    assert trace(jobs, jitter=2) != late


def test_a_jittered_replay_runs_every_job_of_the_stream() -> None:
    (arm,) = engine_run(11, 30, 0.45, arms=("topos",), jitter=1)
    assert arm.left == 0
    assert len(arm.stranded) == 30
    assert arm.could > 0
    assert arm.inside == arm.could


def test_replays_of_a_seed_are_read_as_their_mean_and_range() -> None:
    rows = [(11, 0.5), (12, 0.4), (11, 0.7), (11, 0.6)]
    assert by_seed(rows) == ["0.60 (0.50–0.70)", "0.40"]


def test_on_the_engine_gangs_that_fit_one_rack_get_one_and_clique_blind_ones_do_not() -> None:
    arms = {arm.name: arm for arm in engine_run(11, 40, 0.45, causes=True)}
    assert set(arms) == {"topos", "clique-blind", "firstfit"}
    topos, blind = arms["topos"], arms["clique-blind"]
    assert topos.could > 0
    assert topos.inside == topos.could
    assert blind.inside < blind.could
    assert all(arm.left == 0 for arm in arms.values())
    assert all(len(arm.stranded) == 40 for arm in arms.values())
    for arm in arms.values():  # re-packed perfectly, an arm's rack work strands no more
        assert all(b <= w for b, w in zip(arm.bound, arm.bound_whole, strict=True))
        assert all(b <= s for b, s in zip(arm.bound, arm.stranded, strict=True))
    assert sum(topos.bound) < sum(topos.stranded)
    for arm in arms.values():  # every stranded GPU put down to one cause, each tick
        for t, stranded in enumerate(arm.stranded):
            assert sum(arm.causes[c][t] for c in RACK_CAUSES) == stranded
            extra = sum(arm.causes[f"extra {c}"][t] for c in RACK_CAUSES)
            assert extra == stranded - arm.bound[t]


def _span(gang_size: int, use: dict[str, int]) -> tuple[float, float, dict[str, int], object]:
    return (0.0, 10.0, use, SimpleNamespace(job=SimpleNamespace(gang_size=gang_size)))


def test_stranded_gpus_are_put_down_to_what_each_rack_holds() -> None:
    clique_of: dict[str, str | None] = {f"r{r}-t{t}": f"c{r}" for r in (1, 2, 3) for t in range(18)}
    clique_of["hgx-0"] = None
    spans = [
        # a 4-tray gang split over racks 1 and 2 (3 trays in rack 1, 1 in rack 2)
        _span(4, {"r1-t0": 4, "r1-t1": 4, "r1-t2": 4, "r2-t0": 4}),
        _span(16, {f"r2-t{t}": 4 for t in range(1, 17)}),  # a whole gang in rack 2
        _span(1, {"r3-t0": 1}),  # a lone 1-GPU pod alone in rack 3
        _span(2, {"hgx-0": 8}),  # a gang on an HGX node strands no rack GPU
    ]
    work = RackWork(gangs=(4, 16), large=0, lone=(1,))  # the split gang one item
    causes = stranded_causes(5.0, spans, clique_of, work)
    # racks 1 and 2 both hold a piece of the split gang; rack 3 lone pods only
    assert causes["split ≤18"] == (72 - 12) + (72 - 68)
    assert causes["small only"] == 71
    assert causes["gangs only"] == causes["gangs+small"] == causes["split >18"] == 0
    assert causes["tray fragments"] == 3  # the lone pod's tray
    # 21 trays fit two racks: the emptiest rack in use beyond them is rack 3
    assert causes["extra small only"] == 72
    assert causes["bound rounding"] == (36 - 21) * 4
    assert causes["bound fragments"] == 3
    assert stranded_causes(20.0, spans, clique_of, RackWork((), 0, ()))["small only"] == 0


def test_a_topos_arm_is_read_against_the_clique_blind_arm_with_its_moves_when_that_ran() -> None:
    both = {"clique-blind", "clique-blind+background"}
    assert blind_base("topos+background+racks", both) == "clique-blind+background"
    assert blind_base("topos+background+racks", {"clique-blind"}) == "clique-blind"
    assert blind_base("topos+background", {"clique-blind+background"}) == "clique-blind+background"
    assert blind_base("topos", both) == "clique-blind"
    assert blind_base("topos+background+racks", {"firstfit"}) is None


def test_the_cost_model_and_move_budget_flags_set_every_defrag_arm_and_bad_ones_are_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tuned = defrag_settings("background+racks", max_loss_ratio=0.1, evictions_per_hour=100)
    assert (tuned.mode, tuned.compact_racks) == ("background", True)
    assert (tuned.max_loss_ratio, tuned.evictions_per_hour) == (0.1, 100)
    for flags, named in (
        (["--defrag", "background", "--max-loss-ratio", "-1"], "maxLossRatio: -1.0 is negative"),
        (["--defrag", "background", "--evictions-per-hour", "-5"], "evictionsPerHour: -5"),
        (["--max-loss-ratio", "0.1"], "add one"),  # no --defrag arm for it to set
    ):
        monkeypatch.setattr(sys, "argv", ["clique_placement", "--engine", *flags])
        with pytest.raises(SystemExit):
            main()
        assert named in capsys.readouterr().err
