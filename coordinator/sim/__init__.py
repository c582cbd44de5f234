"""Trace replay: a described cluster, a workload trace, and placement policies compared on it,
each replayed by the production engine on a simulated clock. See ``docs/simulate.md``.

The cluster description and the trace are parsed from text (hardware comes from a
``profile → NodeTopology`` function the caller passes; the CLI uses the agent's profile-driven
fake NVML). The replay (:mod:`.replay`) runs the coordinator's engine — queue and backoff, gang
manager and timeouts, preemption and nominations, recovery, binder — over the in-memory cluster
(:mod:`coordinator.forecast.engine`), on an event loop whose time jumps to the next timer
whenever every task waits (:mod:`coordinator.forecast.clock`). A policy is a framework profile
and a gang planner (:mod:`.policies`). The same engine run forward on a copy of a cluster
predicts when a pending pod starts: :mod:`coordinator.forecast`.

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
