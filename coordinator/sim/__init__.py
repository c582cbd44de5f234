"""Trace replay: a described cluster, a workload trace, and placement policies compared on it.

Pure and synchronous (no I/O, no clock): the cluster description is parsed from text, hardware
comes from a ``profile → NodeTopology`` function the caller passes (the CLI uses the agent's
profile-driven fake NVML), and the replay is a discrete-event loop over the scheduling core's
``Snapshot``. See ``docs/simulate.md``.

With production it shares the pure parts: node labels from the agent's labelers
(``common.labeling``), pods parsed by the core's ``parse_pod``, the core's ``Snapshot`` and
``NodeInfo`` accounting, and placement by the core's ``Framework``/``schedule_one`` and gang
planner (``schedule_gang``). It does not run the engine (``coordinator.engine``): no scheduling
queue or backoff, no ``ClusterView`` over an inventory, no binder or ``ClusterWriter``, no
in-memory cluster, no gang manager (reservations, timeouts, recovery) and no preemption; its own
loop (:mod:`.engine`) orders the jobs and assumes each decision on the snapshot at once.

    spec = parse_cluster(yaml_text)
    nodes = build_nodes(spec, topology_of)
    sim = Simulator(nodes, parse_trace(csv_text, name="trace.csv"), cost_model=spec.cost_model)
    results = [sim.run(make_policy(p)).summary() for p in ("topos", "spread", "firstfit")]
    print(format_table(results))
"""

from coordinator.sim.cluster import ClusterError, ClusterSpec, build_nodes, describe, parse_cluster
from coordinator.sim.costmodel import CostModel
from coordinator.sim.metrics import JobOutcome, RunResult, Summary
from coordinator.sim.policies import POLICIES, Policy, make_policy
from coordinator.sim.replay import ReplaySettings, Simulator
from coordinator.sim.report import format_table
from coordinator.sim.trace import Job, TraceError, dump_csv, dump_jsonl, parse_trace
from coordinator.sim.tracegen import TraceShape, cluster_shape, generate

__all__ = [
    "POLICIES",
    "ClusterError",
    "ClusterSpec",
    "CostModel",
    "Job",
    "JobOutcome",
    "Policy",
    "ReplaySettings",
    "RunResult",
    "Simulator",
    "Summary",
    "TraceError",
    "TraceShape",
    "build_nodes",
    "cluster_shape",
    "describe",
    "dump_csv",
    "dump_jsonl",
    "format_table",
    "generate",
    "make_policy",
    "parse_cluster",
    "parse_trace",
]
