"""Agent steady-state cost: RSS and CPU time per discovery+label cycle (target RSS < 80 MiB).

Each measurement runs in a fresh Python process so memory figures are not polluted by this one:

1. **baseline** — an interpreter that only imports the libraries the agent uses (the Kubernetes
   client as ``common.kube`` loads it, aiohttp, prometheus-client, grpc, msgspec, pynvml …) and
   does nothing: the floor any Python agent with these libraries pays.
2. **agent** — the real ``agent.cycle.Agent`` on the ``dgx-a100`` profile (fake NVML + fake sysfs),
   running ``--cycles`` discovery cycles back to back: discovery (in a worker thread, as in
   production), the health ledger, every labeler, and the publish diff against the Node metadata
   the previous cycle produced (so a steady node's "no patch" path is what is timed). No API
   server: this measures the agent, not the network.

Reported per cycle: CPU time (user+sys of the whole process, so thread hops and the event loop
count) and wall time, as median and p95; RSS after warm-up and after all cycles (growth would
mean a leak), and the agent's RSS over the baseline.

3. **health reads** (``--health-profile``, default the 8-GPU ``dgx-h100``: 18 NVLink ports per
   GPU, the most NVML calls of any profile): the same cycle with and without the NVML health
   reads (ECC, retired pages, row remaps, clock reasons, NVLink error counters, fabric) and the
   health monitor, in the same run, on both NVML paths — the Python fake, and the real
   ``pynvml`` loading the C ``libnvidia-ml.so.1`` (devcluster/nvmlfake; the ctypes cost is
   real there, the driver's is not). p50/p99 CPU and wall per cycle and the ratio; goal ≤ 1.5×.

Run: ``.venv/bin/python -m benchmarks.agent_cycle [--cycles N] [--profile NAME]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

TARGET_RSS_MIB = 80.0
REPO = Path(__file__).resolve().parents[1]

_BASELINE = textwrap.dedent(
    """
    import json, psutil
    import common.kube  # the Kubernetes client as the agent imports it
    import aiohttp, aiohttp.web, prometheus_client, grpc, grpc.aio
    import msgspec, pynvml, yaml, google.protobuf
    print(json.dumps({"rss": psutil.Process().memory_info().rss}))
    """
)

# The same imports with kubernetes_asyncio imported the ordinary way first (every generated API
# and model), i.e. without common.kube's lean import: what the lean import saves.
_EAGER = "import kubernetes_asyncio\n" + _BASELINE

_AGENT = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    import psutil
    from agent.cycle import Agent
    from agent.hardware import Hardware, open_hardware
    from agent.settings import AgentSettings
    from agent.publish import NodeMetadata, plan_patch

    profile, cycles, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    health, sysfs = (sys.argv[4] == "with") if len(sys.argv) > 4 else True, sys.argv[5:]

    def hardware_for():
        if sysfs:  # the real pynvml on the C library (the environment points pynvml at it)
            from agent.devices.source import NvmlSource
            src = NvmlSource(hostname="bench-node", sysfs_root=sysfs[0], health_reads=health)
            return Hardware(source=src)
        from agent.devices.source import ProfileSource
        src = ProfileSource(profile, hostname="bench-node", health_reads=health)
        return Hardware(source=src, close=src.close)

    async def main():
        proc = psutil.Process()
        hardware = hardware_for()
        agent = Agent(AgentSettings(node_name="bench-node", listen=None),
                      source=hardware.source, publisher=None)
        node = NodeMetadata()
        patches = 0
        cpu, wall = [], []
        rss_warm = 0
        for i in range(warmup + cycles):
            t0, w0 = time.process_time(), time.perf_counter()
            result = await agent.cycle()
            plan = plan_patch(node, result.labels)
            if plan.patch is not None:
                patches += 1
                md = plan.patch["metadata"]
                labels = {**node.labels, **md.get("labels", {})}
                annotations = {**node.annotations, **md.get("annotations", {})}
                node = NodeMetadata(
                    labels={k: v for k, v in labels.items() if v is not None},
                    annotations={k: v for k, v in annotations.items() if v is not None},
                )
            t1, w1 = time.process_time(), time.perf_counter()
            if i >= warmup:
                cpu.append(t1 - t0)
                wall.append(w1 - w0)
            if i == warmup - 1:
                rss_warm = proc.memory_info().rss
        if hardware.close is not None:
            hardware.close()
        from common.labeling import labels as compute_labels
        t0 = time.process_time()
        for _ in range(cycles):
            plan_patch(node, compute_labels(result.topology))
        label_cpu = (time.process_time() - t0) / cycles
        print(json.dumps({
            "label_cpu": label_cpu,
            "cpu": cpu, "wall": wall, "rss_warm": rss_warm,
            "rss_end": proc.memory_info().rss, "patches": patches,
            "labels": len(result.labels.labels), "annotations": len(result.labels.annotations),
            "topology_bytes": len(result.labels.annotations.get("topos.io/topology", "")),
        }))

    asyncio.run(main())
    """
)


def _run(code: str, *args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    env = {**(env or os.environ), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=env,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _p95(values: list[float]) -> float:
    return _pct(values, 0.95)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _health_arms(profile: str, cycles: int, warmup: int) -> list[tuple[str, dict[str, object]]]:
    """The agent cycle with and without health reads, on the Python fake and on the C library,
    all in this run (arms interleaved so drift on a shared machine hits each alike)."""
    import tempfile

    from agent.devices.fake_nvml import FakeNvml
    from agent.devices.fake_sysfs import build_fake_sysfs
    from agent.devices.profile import load_profile
    from devcluster.nvmlfake.build import nvml_env
    from devcluster.nvmlfake.state import write_state

    out: list[tuple[str, dict[str, object]]] = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        fake = FakeNvml(load_profile(profile), hostname="bench-node")
        write_state(fake, root / "state")
        build_fake_sysfs(load_profile(profile), root / "sys", gpu_bus_ids=fake.gpu_bus_ids())
        env = nvml_env(root / "state")
        for path in ("python fake", "pynvml + C lib"):
            for mode in ("without", "with"):
                extra = [str(root / "sys")] if path != "python fake" else []
                result = _run(
                    _AGENT,
                    profile,
                    str(cycles),
                    str(warmup),
                    mode,
                    *extra,
                    env=env if extra else None,
                )
                out.append((f"{path}, {mode} health reads", result))
    return out


def _report_health(profile: str, arms: list[tuple[str, dict[str, object]]]) -> bool:
    print(f"  health reads — profile {profile}, per cycle (ms): CPU p50 / p99, wall p50 / p99")
    ok = True
    base: dict[str, tuple[float, float]] = {}
    for name, result in arms:
        cpu = [float(x) * 1000 for x in result["cpu"]]  # type: ignore[attr-defined]
        wall = [float(x) * 1000 for x in result["wall"]]  # type: ignore[attr-defined]
        p50, p99 = _pct(cpu, 0.5), _pct(cpu, 0.99)
        line = (
            f"    {name:40s} CPU {p50:7.2f} / {p99:7.2f}   wall {_pct(wall, 0.5):7.2f} /"
            f" {_pct(wall, 0.99):7.2f}"
        )
        path = name.split(",")[0]
        if "without" in name:
            base[path] = (p50, p99)
        else:
            b50, b99 = base[path]
            ratio = p50 / b50 if b50 else float("inf")
            ok = ok and ratio <= 1.5
            line += f"   ×{ratio:.2f} p50, ×{p99 / b99 if b99 else float('inf'):.2f} p99 CPU"
        print(line)
    print(f"  goal: health reads cost ≤ 1.5× the cycle's CPU (p50): {'PASS' if ok else 'FAIL'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--profile", default="dgx-a100")
    parser.add_argument("--health-profile", default="dgx-h100")
    parser.add_argument("--health-cycles", type=int, default=100)
    args = parser.parse_args(argv)

    baseline = _run(_BASELINE)
    eager = _run(_EAGER)
    agent = _run(_AGENT, args.profile, str(args.cycles), str(args.warmup))
    mib = 1024 * 1024
    base_rss = float(baseline["rss"]) / mib  # type: ignore[arg-type]
    warm = float(agent["rss_warm"]) / mib  # type: ignore[arg-type]
    end = float(agent["rss_end"]) / mib  # type: ignore[arg-type]
    cpu = [float(x) * 1000 for x in agent["cpu"]]  # type: ignore[attr-defined]
    wall = [float(x) * 1000 for x in agent["wall"]]  # type: ignore[attr-defined]

    print(f"agent cycle benchmark — profile {args.profile}, {args.cycles} cycles after "
          f"{args.warmup} warm-up")  # fmt: skip
    print(
        f"  output per cycle: {agent['labels']} labels, {agent['annotations']} annotations, "
        f"topology annotation {agent['topology_bytes']} bytes; "
        f"patches over the run: {agent['patches']} (1 = only the first cycle wrote)"
    )
    print(f"  CPU per cycle:   median {statistics.median(cpu):7.2f} ms   p95 {_p95(cpu):7.2f} ms")
    print(
        f"  of which labelling + publish diff: {float(agent['label_cpu']) * 1000:7.2f} ms CPU "  # type: ignore[arg-type]
        "(the rest is discovery on the fake NVML + fake sysfs, and the thread hop)"
    )
    print(f"  wall per cycle:  median {statistics.median(wall):7.2f} ms   p95 {_p95(wall):7.2f} ms")
    eager_rss = float(eager["rss"]) / mib  # type: ignore[arg-type]
    print(f"  RSS baseline (imports only):  {base_rss:6.1f} MiB")
    print(
        f"  RSS same imports, eager kubernetes_asyncio: {eager_rss:6.1f} MiB (without lean import)"
    )
    print(
        f"  RSS agent after warm-up:      {warm:6.1f} MiB   (+{warm - base_rss:.1f} over baseline)"
    )
    print(f"  RSS agent after all cycles:   {end:6.1f} MiB   (growth {end - warm:+.1f} MiB)")
    verdict = "PASS" if end < TARGET_RSS_MIB else "FAIL"
    print(f"  target RSS < {TARGET_RSS_MIB:.0f} MiB: {verdict}")
    arms = _health_arms(args.health_profile, args.health_cycles, args.warmup)
    health_ok = _report_health(args.health_profile, arms)
    return 0 if verdict == "PASS" and health_ok else 1


if __name__ == "__main__":
    sys.exit(main())
