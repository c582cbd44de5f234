"""The pure scheduling core: no I/O, a snapshot and a config in, a decision or a failure out.

Typical use::

    from coordinator.scheduling import Framework, Snapshot, schedule_one, parse_pod

    framework = Framework.build(load_config(yaml_text))
    result = schedule_one(pod_object, snapshot, framework)
    if isinstance(result, Decision):
        snapshot.assume(parse_pod(pod_object), result.node, result.placement)
        annotations = result.annotations()
    else:
        event_message = result.message   # "0/12 nodes are available: …"
"""

from .config import ConfigError, SchedulerConfig, ScoreWeights, load_config
from .cyclestate import CycleState, StateKey
from .framework import (
    PLACEMENTS,
    Decision,
    Failure,
    Framework,
    NodeVerdict,
    PreFilterResult,
    ScheduleResult,
    schedule_one,
)
from .nodeinfo import NodeInfo, NumaUse, Placement, PodInfo, Snapshot
from .podspec import PodRequest, PodSpecError, Taint, Toleration, parse_pod
from .status import Code, Reason, Status, summarize

__all__ = [
    "PLACEMENTS",
    "Code",
    "ConfigError",
    "CycleState",
    "Decision",
    "Failure",
    "Framework",
    "NodeInfo",
    "NodeVerdict",
    "NumaUse",
    "Placement",
    "PodInfo",
    "PodRequest",
    "PodSpecError",
    "PreFilterResult",
    "Reason",
    "ScheduleResult",
    "SchedulerConfig",
    "ScoreWeights",
    "Snapshot",
    "StateKey",
    "Status",
    "Taint",
    "Toleration",
    "load_config",
    "parse_pod",
    "schedule_one",
    "summarize",
]
