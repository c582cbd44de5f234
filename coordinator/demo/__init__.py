"""The embedded demo (``topos demo``, docs/design.md §7): the real coordinator app on loopback with
the scheduler runtime over an in-memory cluster, a leaf–spine layout of simulated GPU nodes, a
realistic workload, and a report of what happened.

The agent side (fake NVML from profiles, streaming over the real WebSocket) is started by
``cli/demo.py``: the coordinator package never imports the agent.

- :mod:`.embedded` — ``EmbeddedCoordinator``: app + in-memory cluster + scheduler + gangs.
- :mod:`.scenario` — the demo cluster layout and its workload (Pod manifests, in phases).
- :mod:`.report` — what happened, per job and for the cluster, as text.
"""

from coordinator.demo.embedded import EmbeddedCoordinator
from coordinator.demo.report import DemoReport, JobRow, build_report, format_report
from coordinator.demo.scenario import (
    DEMO_NAMESPACE,
    JOB_LABEL,
    DemoJob,
    DemoNode,
    demo_nodes,
    demo_workload,
)

__all__ = [
    "DEMO_NAMESPACE",
    "JOB_LABEL",
    "DemoJob",
    "DemoNode",
    "DemoReport",
    "EmbeddedCoordinator",
    "JobRow",
    "build_report",
    "demo_nodes",
    "demo_workload",
    "format_report",
]
