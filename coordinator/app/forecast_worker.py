"""The forecast's worker process: its pool made with the coordinator's scheduler, the process
spawned at the first forward run (a refresh or a what-if: the pool spawns on its first task, so a
coordinator that never forecasts never pays the ~1 s of CPU a spawn and its imports cost), ended
with the scheduler.

The live forecast (:mod:`coordinator.forecast.live`) runs the engine forward in a process of its
own, so a run never holds the event loop's interpreter lock. Two ways that process could outlive
its use: a graceful stop would wait for the run in flight (the interpreter's exit joins the pool;
Ctrl-C on ``topos demo --serve`` took 40 s on a loaded machine), and a coordinator that dies
without stopping (SIGKILL, an unhandled SIGTERM) leaves the worker waiting on its queue for ever
(the worker holds the queue's write end too, so it never reads end-of-file). :func:`start` gives
the worker a watch on its parent; :func:`stop_now` ends it without waiting.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import multiprocessing.connection
import os
import threading


def start() -> concurrent.futures.ProcessPoolExecutor:
    """One worker, spawned (not forked: the coordinator has threads and an event loop) at the
    first task submitted, not here."""
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_exit_with_parent,
    )


def stop_now(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """End the worker without waiting for the run it is in: that forecast has no reader any more."""
    workers = list((pool._processes or {}).values())  # terminate_workers() from Python 3.14 on
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        process.terminate()


def _exit_with_parent() -> None:
    """In the worker: exit as soon as the coordinator process is gone, however it went."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(0)

    threading.Thread(target=watch, name="exit with the coordinator", daemon=True).start()


__all__ = ["start", "stop_now"]
