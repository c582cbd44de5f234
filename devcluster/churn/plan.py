"""What the harness does, decided by the seed alone: a list of rounds, each a list of actions.

The plan never looks at the cluster (which pods got bound, when), so the same seed gives the same
actions in the same order on every run; only the scheduler's timing differs. Pods and gangs are
tracked as *groups*: a single pod is a group of one, a gang a group of members; deleting a group
deletes all its pods (as deleting a Job or a ``kubectl apply``-ed set would). Deleted names go
back into a pool and are reused: a single pod under the very same name, a gang under the same
gang name with the same member names or with new ones. A *re-apply* deletes a live workload and
submits it again at once under the same names, as a user who deletes and re-applies a manifest.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

GPU_SHAPES: Final = (1, 1, 2, 2, 3, 4, 4, 6, 8)


@dataclass(frozen=True, slots=True)
class Group:
    """One submitted workload: a single pod (``gang`` is None) or a gang's members."""

    name: str
    pods: tuple[str, ...]
    gpus: int
    """GPUs per pod."""
    single_numa: bool = False
    gang: str | None = None
    min_member: int = 1


@dataclass(frozen=True, slots=True)
class Submit:
    group: Group


@dataclass(frozen=True, slots=True)
class Delete:
    group: Group


@dataclass(frozen=True, slots=True)
class Kill:
    """SIGKILL the coordinator ``delay_ms`` after the previous action, then restart it."""

    delay_ms: int


Action = Submit | Delete | Kill


@dataclass(frozen=True, slots=True)
class Round:
    index: int
    actions: tuple[Action, ...]

    @property
    def kills(self) -> int:
        return sum(isinstance(a, Kill) for a in self.actions)


@dataclass(frozen=True, slots=True)
class PlanSettings:
    rounds: int
    kills: int
    """Rounds with a coordinator kill (spread over the run by the seed)."""
    capacity_gpus: int
    """GPUs in the fleet: the plan keeps the live demand around 1.5 times this."""
    gang_share: float = 0.35
    reuse_share: float = 0.5
    reapply_share: float = 0.1
    """Actions that delete a live workload and re-create it under the same names at once."""


class _Planner:
    def __init__(self, seed: int, settings: PlanSettings) -> None:
        self.rng = random.Random(seed)
        self.s = settings
        self.live: list[Group] = []
        self.free_pods: list[str] = []
        self.free_gangs: list[str] = []
        self.counter = 0

    def _fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def _demand(self) -> int:
        return sum(g.gpus * len(g.pods) for g in self.live)

    def submit(self) -> Submit:
        rng = self.rng
        gpus = rng.choice(GPU_SHAPES)
        if rng.random() < self.s.gang_share:
            size = rng.randint(2, 4)
            gpus = min(gpus, 4)
            reuse = self.free_gangs and rng.random() < self.s.reuse_share
            gang = self.free_gangs.pop(rng.randrange(len(self.free_gangs))) if reuse else None
            gang = gang or self._fresh("g")
            # a re-run keeps the member names half the time (same Job re-applied), or gets new
            # ones (a new Job under the same gang name)
            stem = gang if rng.random() < 0.5 else f"{gang}-r{self._fresh('')}"
            group = Group(
                name=gang,
                pods=tuple(f"{stem}-{i}" for i in range(size)),
                gpus=gpus,
                single_numa=gpus <= 4 and rng.random() < 0.25,
                gang=gang,
                min_member=size if rng.random() < 0.75 else size - 1,
            )
        else:
            reuse = self.free_pods and rng.random() < self.s.reuse_share
            name = self.free_pods.pop(rng.randrange(len(self.free_pods))) if reuse else None
            name = name or self._fresh("p")
            group = Group(
                name=name, pods=(name,), gpus=gpus, single_numa=gpus <= 4 and rng.random() < 0.3
            )
        self.live.append(group)
        return Submit(group)

    def delete(self) -> Delete:
        group = self.live.pop(self.rng.randrange(len(self.live)))
        (self.free_gangs if group.gang else self.free_pods).append(group.name)
        return Delete(group)

    def reapply(self) -> tuple[Delete, Submit]:
        """``kubectl delete`` and ``kubectl apply`` of the same workload at once: its pods
        re-created under the very same names as soon as the API server frees them."""
        group = self.live[self.rng.randrange(len(self.live))]
        return Delete(group), Submit(group)

    def round(self, index: int, kill: bool) -> Round:
        rng = self.rng
        actions: list[Action] = []
        for _ in range(rng.randint(1, 4)):
            crowded = self._demand() > 1.5 * self.s.capacity_gpus
            draw = rng.random()
            if self.live and draw < self.s.reapply_share:
                actions.extend(self.reapply())
            elif self.live and (crowded or draw < 0.4):
                actions.append(self.delete())
            else:
                actions.append(self.submit())
        if kill:
            actions.insert(rng.randint(0, len(actions)), Kill(delay_ms=rng.randint(0, 400)))
        return Round(index, tuple(actions))


def make_plan(seed: int, settings: PlanSettings) -> list[Round]:
    """The rounds for ``seed``: the same list for the same seed and settings."""
    planner = _Planner(seed, settings)
    rng = random.Random(seed ^ 0x5EED)
    kill_rounds = set(rng.sample(range(settings.rounds), min(settings.kills, settings.rounds)))
    return [planner.round(i + 1, i in kill_rounds) for i in range(settings.rounds)]
