"""The churn plan is a function of its seed, and exercises what the harness promises: gangs and
single pods of 1–8 GPUs, single-NUMA pods, deletions, names reused after deletion, kills."""

from __future__ import annotations

from devcluster.churn.plan import Delete, Kill, PlanSettings, Submit, make_plan

SETTINGS = PlanSettings(rounds=200, kills=20, capacity_gpus=32)


def test_the_same_seed_gives_the_same_actions_and_another_seed_others() -> None:
    assert make_plan(7, SETTINGS) == make_plan(7, SETTINGS)
    assert make_plan(7, SETTINGS) != make_plan(8, SETTINGS)


def test_a_plan_covers_gangs_reuse_numa_and_kills() -> None:
    plan = make_plan(7, SETTINGS)
    actions = [a for r in plan for a in r.actions]
    submits = [a.group for a in actions if isinstance(a, Submit)]
    assert sum(isinstance(a, Kill) for a in actions) == 20
    assert sum(r.kills for r in plan) == 20
    assert {g.gpus for g in submits if not g.gang} == {1, 2, 3, 4, 6, 8}
    assert any(g.gang and g.min_member < len(g.pods) for g in submits)
    assert any(g.single_numa for g in submits)
    deleted = [a.group for a in actions if isinstance(a, Delete)]
    assert deleted
    # names come back: a single pod under its old name, a gang under its old gang name with the
    # same member names and with new ones
    seen_pods: set[str] = set()
    reused_pod = reused_gang_same = reused_gang_new = False
    gang_members: dict[str, set[tuple[str, ...]]] = {}
    for group in submits:
        if group.gang:
            before = gang_members.setdefault(group.gang, set())
            reused_gang_same |= group.pods in before
            reused_gang_new |= bool(before) and group.pods not in before
            before.add(group.pods)
        else:
            reused_pod |= group.name in seen_pods
            seen_pods.add(group.name)
    assert reused_pod
    assert reused_gang_same
    assert reused_gang_new


def test_a_group_is_only_deleted_while_live_and_reused_only_after_deletion() -> None:
    live: set[str] = set()
    for round_ in make_plan(11, SETTINGS):
        for action in round_.actions:
            if isinstance(action, Submit):
                assert action.group.name not in live
                live.add(action.group.name)
            elif isinstance(action, Delete):
                live.remove(action.group.name)


def test_some_workloads_are_deleted_and_re_applied_at_once_under_the_same_names() -> None:
    reapplied = [
        (a.group, b.group)
        for round_ in make_plan(7, SETTINGS)
        for a, b in zip(round_.actions, round_.actions[1:], strict=False)
        if isinstance(a, Delete) and isinstance(b, Submit) and a.group.pods == b.group.pods
    ]
    assert len(reapplied) >= 10
    assert any(g.gang for g, _ in reapplied)
    assert any(not g.gang for g, _ in reapplied)
