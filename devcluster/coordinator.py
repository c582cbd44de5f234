"""``topos devcluster up --coordinator``: a Topos coordinator beside the control plane.

One ``topos coordinator`` process in the background (outliving ``up``, stopped by ``down``), on a
free 127.0.0.1 port, with the configuration a single replica needs: authentication **on** (the
simulated agents carry pod-bound ServiceAccount tokens, ``devcluster.credentials``), no leader
election, everything else at its defaults (``docs/deploy.md``). It talks to the API server as
``topos-coordinator`` (a client certificate in ``system:masters``: the playground skips the RBAC
of ``deploy/``). Files live in ``<dir>/coordinator/``: ``config.yaml``, ``kubeconfig``,
``user.token`` (for ``curl`` and ``kubectl topos``), ``state.json``; its log is
``<dir>/coordinator.log``. ``topos devcluster restart-coordinator`` starts it again from those
files (after a ``kill -9``, or to apply an edited ``config.yaml``).
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from devcluster.controllers import tail
from devcluster.credentials import AGENT_ACCOUNT, NAMESPACE
from devcluster.processes import alive, free_port, spawn, stop_group

SUBDIR: Final = "coordinator"
LOG_FILE: Final = "coordinator.log"
USER: Final = "topos-coordinator"
_STATE: Final = "state.json"
_ROOT: Final = Path(__file__).resolve().parents[1]


class CoordinatorError(Exception):
    """The coordinator did not become ready; the message says why."""


@dataclass(frozen=True, slots=True)
class CoordinatorProcess:
    pid: int
    url: str
    token_file: Path
    log: Path

    def summary(self) -> str:
        return (
            f"devcluster: Topos coordinator at {self.url} (API {self.url}/v1/…, metrics "
            f"{self.url}/metrics; authentication on: a token is in {self.token_file}); "
            f"pid {self.pid} (log: {self.log})"
        )

    def exports(self) -> list[str]:
        """Shell lines for ``eval``: where ``kubectl topos`` and ``curl`` find it."""
        return [
            f"export TOPOS_COORDINATOR={self.url}",
            f'export TOPOS_TOKEN="$(cat {shlex.quote(str(self.token_file))})"',
        ]


def state_dir(directory: Path) -> Path:
    return directory / SUBDIR


def config(port: int) -> dict[str, Any]:
    """The coordinator's configuration file (``coordinator.app.config``)."""
    return {
        "coordinator": {"listen": f"127.0.0.1:{port}"},
        "auth": {"enabled": True, "agentServiceAccounts": [f"{NAMESPACE}/{AGENT_ACCOUNT}"]},
        "leaderElection": {"enabled": False},
    }


def reserve(directory: Path) -> str:
    """Pick the coordinator's port now (the agents are told its URL before it starts)."""
    port = free_port()
    state = state_dir(directory)
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    (state / "config.yaml").write_text(yaml.safe_dump(config(port), sort_keys=False))
    return f"http://127.0.0.1:{port}"


def start_coordinator(
    *, kubeconfig: Path, directory: Path, url: str, token_file: Path, timeout_s: float = 120.0
) -> CoordinatorProcess:
    """Start ``topos coordinator`` with the config ``reserve`` wrote, wait until ``/readyz``
    answers 200, and record it for ``stop_coordinator``."""
    state = state_dir(directory)
    log = directory / LOG_FILE
    argv = [
        sys.executable,
        "-m",
        "cli.main",
        "coordinator",
        f"--kubeconfig={kubeconfig}",
        f"--config={state / 'config.yaml'}",
    ]
    process = spawn(argv, log_path=log, die_with_parent=False, cwd=_ROOT)
    running = CoordinatorProcess(process.pid, url, token_file, log)
    (state / _STATE).write_text(json.dumps({"pid": process.pid, "url": url}))
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise CoordinatorError(
                f"topos coordinator exited with status {process.returncode}; "
                f"last log lines ({log}):\n{tail(log)}"
            )
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=5) as reply:
                if reply.status == 200:
                    return running
        except urllib.error.HTTPError as exc:
            last = f"{exc.code} {exc.read()[:200]!r}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.2)
    stop_group(process.pid, grace_s=10.0)  # its files stay: ``down`` removes them
    raise CoordinatorError(
        f"topos coordinator not ready after {timeout_s:.0f}s ({last}); see {log}"
    )


def restart_coordinator(*, directory: Path, timeout_s: float = 120.0) -> CoordinatorProcess:
    """Start the coordinator ``up`` recorded in ``directory`` again, on the same URL with the same
    configuration, kubeconfig and token (after it was killed, or to pick up an edited
    ``config.yaml``); a running one is stopped first (SIGTERM, then SIGKILL)."""
    state = state_dir(directory)
    try:
        url = str(json.loads((state / _STATE).read_text())["url"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CoordinatorError(
            f"no coordinator recorded in {directory}: start the playground with "
            "`topos devcluster up --coordinator`"
        ) from exc
    pid = _recorded_pid(state)
    if pid and alive(pid) and _runs_coordinator(pid):
        stop_group(pid, grace_s=10.0)
    return start_coordinator(
        kubeconfig=state / "kubeconfig",
        directory=directory,
        url=url,
        token_file=state / "user.token",
        timeout_s=timeout_s,
    )


def stop_coordinator(*, directory: Path) -> None:
    """Stop the recorded coordinator (SIGTERM, then SIGKILL) and remove its files."""
    state = state_dir(directory)
    pid = _recorded_pid(state)
    if pid and alive(pid) and _runs_coordinator(pid):
        stop_group(pid, grace_s=10.0)
    shutil.rmtree(state, ignore_errors=True)


def _recorded_pid(state: Path) -> int:
    try:
        return int(json.loads((state / _STATE).read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _runs_coordinator(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"cli.main" in argv and b"coordinator" in argv
