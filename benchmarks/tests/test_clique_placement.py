"""The NVLink clique benchmark through the production engine, on a short stream: the clique tier
keeps every gang that could fit one rack inside one, the clique-blind planner does not, and
every arm runs every job."""

from __future__ import annotations

from benchmarks.clique_placement import blind_base, engine_run, stream, trace


def test_the_stream_becomes_a_trace_of_the_same_jobs() -> None:
    jobs = stream(11, 20, 0.45)
    rows = trace(jobs)
    assert [r.job_id for r in rows] == [j.name for j in jobs]
    gang = next(r for r, j in zip(rows, jobs, strict=True) if j.trays)
    assert (gang.gang_size, gang.gpus) == (next(j.trays for j in jobs if j.trays), 4)
    assert {r.gpus for r, j in zip(rows, jobs, strict=True) if not j.trays} <= {0, 1, 2, 3, 4}


def test_on_the_engine_gangs_that_fit_one_rack_get_one_and_clique_blind_ones_do_not() -> None:
    arms = {arm.name: arm for arm in engine_run(11, 40, 0.45)}
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


def test_a_topos_arm_is_read_against_the_clique_blind_arm_with_its_moves_when_that_ran() -> None:
    both = {"clique-blind", "clique-blind+background"}
    assert blind_base("topos+background+racks", both) == "clique-blind+background"
    assert blind_base("topos+background+racks", {"clique-blind"}) == "clique-blind"
    assert blind_base("topos+background", {"clique-blind+background"}) == "clique-blind+background"
    assert blind_base("topos", both) == "clique-blind"
    assert blind_base("topos+background+racks", {"firstfit"}) is None
