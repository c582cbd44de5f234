"""Topos at another commit on the same arrivals (``sharing_trace --against REV``).

Issue 17 asks for sharing "at equal or better speed per decision than today": the code that
existed when it was filed, not only this build's own whole-GPU arm (which later work made faster
too). This arm checks out ``REV`` into a temporary git worktree and runs *its* Topos arm (its
scheduling core, its ``benchmarks/sharing/topos_arm.py``) in a process of its own, on the seed's
workload drawn by its own ``trace.py`` — refused when that draw differs from this build's.

The collector is set as this build's arm sets it (frozen after the cluster is built, the
coordinator's ``STEADY_THRESHOLDS``). An arm that predates ``steady_collector`` gets the same
settings through a clock that settles the collector just before its first timed decision, so the
comparison is of the scheduling code, not of the collector. This tree's fraction arm is run the
same way (a fresh process per seed, :func:`this_tree`), and the speed goal compares those two:
an arm run inside the benchmark's own process, after the baselines, carries their objects and is
slower for it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from benchmarks.sharing.replay import Run, curve
from benchmarks.sharing.trace import Workload
from coordinator.app.collector import STEADY_THRESHOLDS

__all__ = [
    "THIS_TREE",
    "AgainstError",
    "Tree",
    "against_label",
    "replay_at",
    "this_tree",
    "worktree",
]

ROOT: Final = Path(__file__).resolve().parents[2]

# Runs inside REV's worktree: argv = scale seed ratio fraction(0/1) thresholds("a,b,c"); prints
# one JSON line.
_SCRIPT: Final = r"""
import gc, json, sys, time
from benchmarks.sharing import topos_arm
from benchmarks.sharing.trace import workload

scale, seed, ratio = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
fraction = sys.argv[4] == "1"
thresholds = tuple(int(t) for t in sys.argv[5].split(","))
work = workload(scale, seed, ratio)
if not hasattr(topos_arm, "steady_collector"):
    class _SettlingClock:
        first = True

        def perf_counter(self):
            if self.first:
                self.first = False
                gc.collect()
                gc.freeze()
                gc.set_threshold(*thresholds)
            return time.perf_counter()

    topos_arm.time = _SettlingClock()
got = topos_arm.replay(work, fraction=fraction)
print(json.dumps({
    "pods": len(work.pods),
    "capacity": work.capacity,
    "demand": sum(p.demand for p in work.pods),
    "placed": got.placed,
    "seconds": got.seconds,
    "allocated": got.allocated,
    "violations": list(got.violations),
}))
"""


class AgainstError(RuntimeError):
    """REV could not be checked out or run, or it draws other arrivals."""


THIS_TREE: Final = "this tree"


def against_label(rev: str, *, fraction: bool = False) -> str:
    return f"topos at {rev}, {'fractions' if fraction else 'whole GPU per fraction'}"


@dataclass(frozen=True, slots=True)
class Tree:
    rev: str  # as the user named it
    path: Path


@contextmanager
def worktree(rev: str) -> Iterator[Tree]:
    """``rev`` checked out (detached) in a temporary directory outside the repository."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise AgainstError(f"git {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip()

    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    with tempfile.TemporaryDirectory(prefix="topos-against-") as tmp:
        path = Path(tmp) / "tree"
        git("worktree", "add", "--detach", "--quiet", str(path), commit)
        try:
            if not (path / "benchmarks" / "sharing" / "topos_arm.py").exists():
                raise AgainstError(f"{rev} has no benchmarks/sharing/topos_arm.py")
            yield Tree(rev, path)
        finally:
            git("worktree", "remove", "--force", str(path))


def this_tree() -> Tree:
    """This checkout as it is (uncommitted changes included), to run its arm as ``REV``'s is
    run: a fresh process each seed, so neither side carries the other arms' objects."""
    return Tree(THIS_TREE, ROOT)


def replay_at(
    tree: Tree, work: Workload, *, scale: float, ratio: float, fraction: bool = False
) -> Run:
    """The Topos arm of ``tree`` on the arrivals of ``work`` (drawn with ``scale`` and
    ``ratio``), in a fresh process."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _SCRIPT,
            repr(scale),
            str(work.seed),
            repr(ratio),
            "1" if fraction else "0",
            ",".join(map(str, STEADY_THRESHOLDS)),
        ],
        cwd=tree.path,
        env={"PYTHONPATH": str(tree.path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-3:]
        raise AgainstError(f"{tree.rev}'s Topos arm failed: {' | '.join(tail)}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    demand = [p.demand for p in work.pods]
    if (got["pods"], got["capacity"], got["demand"]) != (len(demand), work.capacity, sum(demand)):
        raise AgainstError(
            f"{tree.rev} draws other arrivals for seed {work.seed} ({got['pods']} pods, "
            f"capacity {got['capacity']}; this build: {len(work.pods)}, {work.capacity})"
        )
    return Run(
        against_label(tree.rev, fraction=fraction),
        work.seed,
        len(work.pods),
        int(got["placed"]),
        float(got["seconds"]),
        curve(demand, got["allocated"], work.capacity),
        tuple(got["violations"]),
    )
