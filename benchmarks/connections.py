"""How many TCP connections a process opens to one port while a benchmark measures it.

A new connection to the API server is a TLS handshake (about a millisecond of the client's CPU);
a client that reuses keep-alive connections opens a handful per run. :class:`ConnectionCount`
samples the process's sockets from a thread (``psutil``, every ``every_s``) and counts the
distinct local ports seen connected to ``port``: a connection that opens and closes between two
samples is missed, so the figure is a floor.
"""

from __future__ import annotations

import threading
from typing import Self

import psutil

__all__ = ["ConnectionCount"]


class ConnectionCount:
    """Start with :meth:`start`, read :attr:`opened` and :attr:`peak` after :meth:`stop`."""

    def __init__(self, pid: int, port: int, *, every_s: float = 0.01) -> None:
        self.pid = pid
        self.port = port
        self.every_s = every_s
        self.opened = 0  # connections seen that were not open at the start
        self.peak = 0  # most open at once
        self._before: set[int] = set()
        self._seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_all, daemon=True)

    def _open_now(self) -> set[int]:
        try:
            sockets = psutil.Process(self.pid).net_connections(kind="tcp")
        except psutil.Error:
            return set()
        return {s.laddr.port for s in sockets if s.raddr and s.raddr.port == self.port}

    def _sample_all(self) -> None:
        while not self._stop.wait(self.every_s):
            now = self._open_now()
            self.peak = max(self.peak, len(now))
            self._seen |= now - self._before

    def start(self) -> Self:
        self._before = self._open_now()
        self.peak = len(self._before)
        self._thread.start()
        return self

    def stop(self) -> Self:
        self._stop.set()
        self._thread.join()
        self.opened = len(self._seen)
        return self
