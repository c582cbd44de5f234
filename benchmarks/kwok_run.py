"""One measured run of the KWOK benchmark (``benchmarks/kwok_throughput.py``): what was sent,
bound and Running when, the scheduler's CPU, memory and API requests, and the line printed for
it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from benchmarks.apiserver_metrics import Requests, by_kind
from benchmarks.kwok_cluster import Limit

__all__ = ["Run", "cpu_seconds", "worker_cpu_seconds"]


@dataclass
class Run:
    scheduler: str
    limit: Limit
    pods: int
    sent: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    created_s: float = 0.0
    cpu_s: float = 0.0
    worker_cpu_s: float = 0.0  # of cpu_s, the scheduler's child processes' (Topos' forecast)
    apiserver_cpu_s: float = 0.0
    timed_out: bool = False
    backlog: bool = False
    workload: str = "gpu"
    launched: float = 0.0
    load: float = 0.0  # 1-minute load average at the end of the run (a shared machine)
    requests: Requests = field(default_factory=Requests)  # the scheduler's, from its start
    rss_mib: float = 0.0  # the scheduler process's resident memory when the last pod was bound

    @property
    def cpu_ms_per_pod(self) -> float:
        return 1000 * self.cpu_s / max(1, len(self.bound))

    @property
    def requests_per_pod(self) -> float:
        return sum(self.requests.values()) / max(1, len(self.bound))

    @property
    def mode(self) -> str:
        return "backlog" if self.backlog else "stream"

    @property
    def start(self) -> float:
        """Streaming: the first create sent; backlog: the first bind (start-up excluded)."""
        if self.backlog:
            return min(self.bound.values()) if self.bound else float("nan")
        return min(self.sent.values())

    @property
    def span_s(self) -> float:
        return max(self.bound.values()) - self.start if self.bound else float("nan")

    @property
    def rate(self) -> float:
        return len(self.bound) / self.span_s if self.bound else 0.0

    @property
    def create_rate(self) -> float:
        return self.pods / self.created_s

    @property
    def kept_up(self) -> float:
        """Streamed: bound pods/s over the rate this run's pods were created at. Both schedulers
        bind about as fast as the API server lets the benchmark create, which varies from run to
        run on a shared machine: this is the part of it each scheduler kept up with."""
        return self.rate / self.create_rate if self.created_s else float("nan")

    def latency_ms(self, q: float) -> float:
        values = sorted(self.bound[n] - self.sent[n] for n in self.bound if n in self.sent)
        if not values:
            return float("nan")
        return 1000 * values[min(len(values) - 1, max(0, round(q / 100 * len(values)) - 1))]

    def summary(self) -> str:
        running = (
            f"Running {len(self.running)}/{self.pods} by "
            f"{max(self.running.values()) - self.start:.1f}s"
            if self.running
            else "Running 0"
        )
        if self.backlog:
            first = self.start - self.launched
            timing = f"first bind {first:.1f}s after the scheduler started"
        else:
            timing = (
                f"create→bound p50 {self.latency_ms(50):6.0f} ms p99 {self.latency_ms(99):6.0f} ms"
                f", {self.kept_up:.1%} of the creation rate"
            )
        return (
            f"{self.scheduler:14s} {self.limit.label:21s} {self.mode:7s} {len(self.bound)}/"
            f"{self.pods} bound in {self.span_s:6.2f}s = {self.rate:6.1f} pods/s  {timing}  "
            f"(created at {self.create_rate:.0f}/s; scheduler CPU {self.cpu_s:.1f}s"
            + (f" ({self.worker_cpu_s:.1f}s in workers)" if self.worker_cpu_s >= 0.05 else "")
            + " = "
            f"{self.cpu_ms_per_pod:.2f} ms/pod; "
            f"apiserver CPU {self.apiserver_cpu_s:.1f}s; {running}; RSS {self.rss_mib:.0f} MiB; "
            f"load {self.load:.1f})"
            f"\n{'':14s} API requests {self.requests_per_pod:.2f}/pod: {by_kind(self.requests)}"
            + ("  TIMED OUT" if self.timed_out else "")
        )

    def write_series(self, path: Path) -> None:
        """The pods as CSV, by send time: seconds from :attr:`start` to send, bind, Running."""
        t0 = self.start

        def at(times: dict[str, float], name: str) -> str:
            return f"{times[name] - t0:.4f}" if name in times else ""

        names = sorted(self.sent, key=self.sent.__getitem__)
        lines = ["pod,sent_s,bound_s,running_s"]
        lines += [
            f"{n},{at(self.sent, n)},{at(self.bound, n)},{at(self.running, n)}" for n in names
        ]
        path.write_text("\n".join(lines) + "\n")


def cpu_seconds(pid: int) -> float:
    """The process's CPU and its children's, those that ended and those still running (the
    coordinator's forecast runs in a worker process of its own)."""
    return _cpu_seconds(pid, own=True)


def worker_cpu_seconds(pid: int) -> float:
    """Of :func:`cpu_seconds`, the children's alone."""
    return _cpu_seconds(pid, own=False)


def _cpu_seconds(pid: int, *, own: bool) -> float:
    try:
        process = psutil.Process(pid)
        t = process.cpu_times()
        total = float((t.user + t.system if own else 0.0) + t.children_user + t.children_system)
        children = process.children(recursive=True)
    except psutil.Error:
        return 0.0
    for child in children:
        with contextlib.suppress(psutil.Error):
            c = child.cpu_times()
            total += c.user + c.system
    return total
