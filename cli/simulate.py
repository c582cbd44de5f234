"""``topos simulate``: replay a workload trace over a described cluster, Topos against baselines;
or write a synthetic trace fitted to the cluster (``--generate N``). See docs/simulate.md."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from agent.devices.profile import ProfileError
from agent.devices.source import discover_profile
from cli.errors import CliError
from common.model import NodeTopology
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.engine.gangs.service import GangSettings
from coordinator.forecast.engine import EngineSettings
from coordinator.sim import (
    POLICIES,
    ClusterError,
    ClusterSpec,
    ReplaySettings,
    Simulator,
    TraceError,
    build_nodes,
    cluster_shape,
    describe,
    dump_csv,
    dump_jsonl,
    format_table,
    generate,
    make_policy,
    parse_cluster,
    parse_trace,
)
from coordinator.sim.report import format_duration

BASELINES = tuple(p for p in POLICIES if p != "topos")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="replay a workload trace over a described cluster (Topos vs baselines)",
        description=(
            "Replay a trace (CSV or JSON Lines) over a cluster described in YAML and report job "
            "completion time, queueing delay, GPU utilisation, fragmentation and locality, for "
            "Topos and optional baseline policies on the same input. With --generate N, write "
            "a synthetic trace fitted to the cluster instead."
        ),
    )
    parser.add_argument("--cluster", required=True, metavar="F", help="cluster description (YAML)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", metavar="F", help="trace to replay (.csv or .jsonl)")
    source.add_argument(
        "--generate", type=int, metavar="N", help="write a synthetic trace of N jobs and exit"
    )
    parser.add_argument(
        "--baseline",
        default="",
        metavar="P[,P]",
        help=f"baseline policies to run on the same input: {', '.join(BASELINES)} (or 'all')",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--no-preemption",
        action="store_true",
        help="the engine does not preempt (priority then only orders the queue)",
    )
    gen = parser.add_argument_group("with --generate")
    gen.add_argument(
        "--load", type=float, default=0.9, help="offered load: GPU-time asked / GPU-time there"
    )
    gen.add_argument("--seed", type=int, default=1, help="random seed (same seed, same trace)")
    gen.add_argument(
        "-o", "--output", metavar="F", help="trace file to write (.csv or .jsonl; default stdout)"
    )
    parser.set_defaults(func=run)


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise CliError(f"cannot read {what} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"{what} {path} is not UTF-8 text") from None


def topology_resolver(cluster_file: str) -> Callable[[str], NodeTopology]:
    """Profiles by built-in name, or by file path relative to the cluster file."""
    base = Path(cluster_file).resolve().parent

    def topology_of(profile: str) -> NodeTopology:
        ref = profile
        if "/" in profile or profile.endswith((".yaml", ".yml")):
            path = Path(profile)
            ref = str(path if path.is_absolute() else base / path)
        try:
            return discover_profile(ref, hostname=profile)
        except ProfileError as exc:
            raise CliError(f"{cluster_file}: {exc}") from None

    return topology_of


def load_cluster(path: str) -> tuple[ClusterSpec, list[NodeInfo]]:
    try:
        spec = parse_cluster(_read(path, "cluster"), name=path)
    except ClusterError as exc:
        raise CliError(str(exc)) from None
    return spec, build_nodes(spec, topology_resolver(path))


def _policies(text: str) -> list[str]:
    names = ["topos"]
    if text.strip() == "all":
        return [*names, *BASELINES]
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if part not in BASELINES:
            raise CliError(f"--baseline {part!r}: unknown policy (known: {', '.join(BASELINES)})")
        if part not in names:
            names.append(part)
    return names


def _generate(args: argparse.Namespace, nodes: list[NodeInfo]) -> int:
    if args.generate < 1 or args.generate > 1_000_000:
        raise CliError("--generate N: N must be between 1 and 1,000,000")
    if not 0 < args.load <= 10:
        raise CliError("--load must be a number in (0, 10]")
    jobs = generate(cluster_shape(nodes, jobs=args.generate, load=args.load, seed=args.seed))
    jsonl = bool(args.output) and args.output.endswith((".jsonl", ".ndjson"))
    text = dump_jsonl(jobs) if jsonl else dump_csv(jobs)
    if args.output and args.output != "-":
        try:
            Path(args.output).write_text(text)
        except OSError as exc:
            raise CliError(f"cannot write {args.output}: {exc.strerror}") from None
        print(f"wrote {len(jobs)} jobs to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def run(args: argparse.Namespace) -> int:
    policies = _policies(args.baseline)
    spec, nodes = load_cluster(args.cluster)
    if args.generate is not None:
        return _generate(args, nodes)
    try:
        jobs = parse_trace(_read(args.trace, "trace"), name=args.trace)
    except TraceError as exc:
        raise CliError(str(exc)) from None
    settings = ReplaySettings(
        engine=EngineSettings(gangs=GangSettings(preemption=not args.no_preemption))
    )
    sim = Simulator(nodes, jobs, cost_model=spec.cost_model, settings=settings)
    summaries = []
    unplaced: dict[str, list[dict[str, str]]] = {}
    for name in policies:
        result = sim.run(make_policy(name))
        summaries.append(result.summary())
        unplaced[name] = [
            {"job_id": sim.jobs[i].job_id, "reason": why}
            for i, why in sorted(result.unplaced.items())
        ]
    shape = describe(nodes)
    if args.json:
        doc = {
            "cluster": {"name": spec.name, **shape},
            "trace": {"file": args.trace, "jobs": len(jobs)},
            "costModel": {
                "link": dict(spec.cost_model.link),
                "network": dict(spec.cost_model.network),
            },
            "policies": [{**s.as_dict(), "unplaced_jobs": unplaced[s.policy]} for s in summaries],
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    gpu_hours = (
        sum(j.duration_s * j.gang_size * (j.gpus if not j.mig_profile else 0) for j in jobs) / 3600
    )
    span = max(j.arrival_s for j in jobs) - min(j.arrival_s for j in jobs)
    print(
        f"Cluster {spec.name}: {shape['nodes']} nodes, {shape['gpus']} GPUs"
        + (f", {shape['mig_instances']} MIG instances" if shape["mig_instances"] else "")
        + f", {shape['leaves']} leaves / {shape['spines']} spines"
    )
    print(
        f"Trace {args.trace}: {len(jobs)} jobs arriving over {format_duration(span)}, "
        f"{gpu_hours:,.0f} whole-GPU hours asked"
    )
    for name in policies:
        print(f"  {name:9s} {POLICIES[name]}")
    print()
    sys.stdout.write(format_table(summaries))
    return 0
