"""``benchmarks.dra_placement``'s judging of one claim and its trace (nothing here runs the
benchmark or starts a process)."""

from __future__ import annotations

from agent.devices import discover_profile
from benchmarks.dra_placement import Placement, Tally, judge, make_trace, rows


def _claim(node: str | None, *devices: int) -> Placement:
    return Placement("c", len(devices) or 2, "pcie-8x", node, tuple(devices))


def test_a_pix_pair_is_the_best_a_pcie_box_offers_and_a_node_pair_is_not() -> None:
    pcie = discover_profile("pcie-8x", hostname="p")
    assert judge(_claim("p", 0, 1), pcie) == Tally(
        claims=1, best=1, numa_possible=1, numa_aligned=1
    )
    assert judge(_claim("p", 0, 2), pcie).best == 0  # NODE where PIX was possible
    across = judge(_claim("p", 0, 1, 4, 5), pcie)
    assert (across.best, across.numa_aligned) == (0, 0)  # SYS and two sockets; NODE was possible
    whole = judge(_claim("p", *range(8)), pcie)
    assert (whole.best, whole.numa_possible) == (1, 0)  # 8 GPUs: SYS is all there is


def test_numa_is_not_judged_where_the_profile_does_not_know_it() -> None:
    dgx1 = discover_profile("dgx1-v100", hostname="v")
    assert judge(_claim("v", 0, 1), dgx1).numa_possible == 0


def test_an_unplaced_claim_counts_apart() -> None:
    pcie = discover_profile("pcie-8x", hostname="p")
    assert judge(_claim(None), pcie) == Tally(unplaced=1)
    table = rows({"kube-scheduler": {("pcie-8x", "2"): Tally(claims=3, best=2, unplaced=1)}})
    assert table[0]["kube-scheduler: claims"] == "3 (+1 unplaced)"
    assert table[0]["kube-scheduler: best link"] == "67 %"
    assert table[0]["kube-scheduler: NUMA-aligned"] == "—"


def test_the_trace_is_the_seeds() -> None:
    profiles = ["dgx-a100", "pcie-8x"]
    trace = make_trace(60, 3, profiles)
    assert trace == make_trace(60, 3, profiles)
    assert trace != make_trace(60, 4, profiles)
    assert {a.gpus for a in trace} == {2, 4, 8}
    assert {a.profile for a in trace} == set(profiles)
    assert all(a.leaves_at > a.index for a in trace)
