"""Child processes of the control plane: free ports, start in a process group, wait until
healthy, stop for sure."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import http.client
import os
import random
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

_PR_SET_PDEATHSIG = 1


#: Where the kernel's local port range is read (``net.ipv4.ip_local_port_range``).
EPHEMERAL_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Below this, ports other services are registered for; ``free_port`` stays above.
_FLOOR: Final = 20000
#: Kubernetes' default Service NodePort range starts here (a playground on a cluster's node).
_NODE_PORTS: Final = 30000
_handed_out: set[int] = set()
_handing_out = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing is bound to on ``host`` right now, for a server started next.

    It lies outside the kernel's ephemeral range (``net.ipv4.ip_local_port_range``): a port the
    kernel picks for ``bind(0)`` comes from that range, which also supplies the local port of
    every outgoing connection, so between the pick and the server's ``bind`` a client's
    connection could take it (Kueue once stopped at start with ``listen tcp
    127.0.0.1:51897: bind: address already in use``). A port outside the range is only ever
    taken by a server asking for it; it also stays below Kubernetes' NodePort range
    (30000-32767). Never the same port twice in one process. Where the
    range leaves no room (a machine that widened it), the kernel's pick."""
    room = _outside_ephemeral()
    with _handing_out:
        for port in random.sample(room, min(100, len(room))):
            if port not in _handed_out and _bindable(host, port):
                _handed_out.add(port)
                return port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            picked: int = sock.getsockname()[1]
        _handed_out.add(picked)
        return picked


@functools.cache
def _outside_ephemeral() -> range:
    """The ports from ``_FLOOR`` up to the ephemeral range and Kubernetes' NodePorts (or above
    the ephemeral range, where that is the wider room); empty if neither holds 1,000."""
    try:
        low, high = (int(v) for v in EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    below = range(_FLOOR, min(low, _NODE_PORTS))
    above = range(max(high + 1, _FLOOR), 65536)
    wider = max(below, above, key=len)
    return wider if len(wider) >= 1000 else range(0)


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    die_with_parent: bool,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new process group (and session), output to ``log_path``.

    With ``die_with_parent`` the kernel kills it if this process dies, even by SIGKILL, so a
    crashed test run leaves nothing behind. (Linux ties this to the thread that spawned it:
    call from the main thread.) Without it the process outlives us (``devcluster up``).
    """
    with log_path.open("ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,
            env=env,
            cwd=cwd,
            close_fds=True,
        )


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # the state letter follows the parenthesised command name
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is alive (zombies don't count)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        # after the name: state, ppid, pgrp
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def stop_group(
    pgid: int, *, grace_s: float = 10.0, reap: Callable[[], object] | None = None
) -> None:
    """SIGTERM the process group, SIGKILL whatever is left after ``grace_s``, wait until gone.

    ``reap`` (e.g. ``Popen.poll``) collects our own child so it doesn't linger as a zombie.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if reap is not None:
            reap()
        if not group_alive(pgid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if reap is not None:
            reap()
        if not group_alive(pgid):
            return
        time.sleep(0.05)


def wait_https_ok(
    poll: Callable[[], int | None], port: int, path: str, *, timeout_s: float
) -> str | None:
    """Poll ``https://127.0.0.1:<port><path>`` (any certificate: the components' own are
    self-signed) until it answers 200: ``None``; otherwise why not — the process exited
    (``poll()`` returned its status) or the time ran out — in a few words."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        code = poll()
        if code is not None:
            return f"exited with status {code}"
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read().decode("utf-8", "replace")
            if response.status == 200:
                return None
            last = f"{response.status} {body[:200]}"
        except (OSError, http.client.HTTPException) as exc:
            last = str(exc)
        finally:
            connection.close()
        time.sleep(0.2)
    return f"{path} not ok after {timeout_s:.0f}s (last answer: {last})"
