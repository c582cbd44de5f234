"""Benchmark: one full discovery of a DGX A100 with MIG on every GPU, through the fake NVML.

Prints p50/p99 per discovery (target: under 50 ms) and, as a baseline in the same run, the same
machine without MIG (so the MIG enumeration's share is visible). With ``--real`` it also times
real NVML on this machine (when a driver is present).

    python -m benchmarks.discovery [--runs 200] [--real]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from agent.devices import NvmlSource, NvmlUnavailable, ProfileSource

TARGET_MS = 50.0


def _time(fn: Callable[[], object], runs: int) -> list[float]:
    fn()  # warm-up
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000.0)
    return sorted(samples)


def _report(label: str, samples: list[float]) -> float:
    p50 = statistics.median(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(f"{label:<34} n={len(samples):<4} p50 {p50:7.2f} ms   p99 {p99:7.2f} ms")
    return p50


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--real", action="store_true", help="also time real NVML here")
    args = parser.parse_args(argv)

    with ProfileSource("dgx-a100-mig", hostname="bench") as mig:
        topo = mig.discover()
        instances = sum(len(g.mig_instances) for g in topo.gpus)
        calls_before = mig.nvml.calls
        mig.discover()
        calls = mig.nvml.calls - calls_before
        print(f"dgx-a100-mig: {len(topo.gpus)} GPUs, {instances} MIG instances, {calls} NVML calls")
        p50 = _report("discovery, dgx-a100 + MIG (fake)", _time(mig.discover, args.runs))
    with ProfileSource("dgx-a100", hostname="bench") as plain:
        _report("baseline: dgx-a100, MIG off", _time(plain.discover, args.runs))
    build = _time(lambda: ProfileSource("dgx-a100-mig").close(), max(5, args.runs // 20))
    _report("setup: profile + fake sysfs tree", build)
    if args.real:
        try:
            _report(
                "real NVML on this machine", _time(NvmlSource().discover, max(5, args.runs // 10))
            )
        except NvmlUnavailable as exc:
            print(f"real NVML: {exc}")
    verdict = "OK" if p50 < TARGET_MS else "OVER TARGET"
    print(f"target < {TARGET_MS:.0f} ms per discovery (p50): {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
