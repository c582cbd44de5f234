"""The scheduler runtime: the pure scheduling core turned into a running secondary scheduler.

- :mod:`.snapshot` — ``ClusterView``: inventory → ``Snapshot``, incrementally, with assumptions.
- :mod:`.queue` — ``SchedulingQueue``: priority, backoff, unschedulable pods (pure).
- :mod:`.pending` — ``PendingWatcher``: our pending pods from the API server into the queue.
- :mod:`.cluster` — ``ClusterWriter``: bind, explain, evict; :mod:`.kube_cluster` and
  :mod:`.memory_cluster` implement it.
- :mod:`.binder` — binds in the background while the next pod is scheduled.
- :mod:`.loop` — ``Scheduler``: the loop itself, waiting pods, explanations, what-if.
- :mod:`.service` — ``SchedulerRuntime``: all of it as one async context manager.

See docs/runtime.md.
"""

from .cluster import BindConflict, ClusterError, ClusterWriter, PodRef, scheduled_message
from .kube_cluster import KubeClusterWriter
from .loop import Attempt, PostFilterHook, RuntimeSettings, RuntimeStats, Scheduler, WaitingPod
from .memory_cluster import MemoryCluster
from .pending import PendingWatcher
from .queue import QueuedPod, QueueSettings, SchedulingQueue
from .service import SchedulerRuntime
from .snapshot import ClusterView

__all__ = [
    "Attempt",
    "BindConflict",
    "ClusterError",
    "ClusterView",
    "ClusterWriter",
    "KubeClusterWriter",
    "MemoryCluster",
    "PendingWatcher",
    "PodRef",
    "PostFilterHook",
    "QueueSettings",
    "QueuedPod",
    "RuntimeSettings",
    "RuntimeStats",
    "Scheduler",
    "SchedulerRuntime",
    "SchedulingQueue",
    "WaitingPod",
    "scheduled_message",
]
