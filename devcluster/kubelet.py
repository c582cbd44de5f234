"""KWOK plays the kubelet of the simulated nodes (``topos devcluster up --nodes …``).

One ``kwok`` process (built by ``devcluster.binaries.ensure(kwok=True)``) manages the Nodes
labelled ``topos.io/simulated=true`` — only those — with the stages in ``devcluster/kwok/``
(rendered into the state directory with the Job default run time):

- ``pod-create``, ``pod-ready``: a bound pod gets a pod IP and host IP, ``Initialized``, then
  phase ``Running`` with ``ContainersReady`` and ``Ready`` (``PodScheduled`` is the binding's);
- ``pod-complete``: a pod annotated ``topos.io/sim-duration: 10m`` (a Go duration) ends
  ``Succeeded`` that long after its containers started, containers terminated with exit code 0;
  ``pod-sim-duration-invalid`` marks a malformed value on the pod (condition
  ``SimDurationValid=False`` and a Warning Event) and lets it run; a pod a Job owns without the
  annotation ends after ``job_duration_s`` (``up --job-duration``, 30 s; 0: it runs until deleted);
- ``node-heartbeat``: the Ready condition's heartbeat time moves on about once a minute, and KWOK
  renews each node's Lease in ``kube-node-lease``.

Who owns what on a simulated Node: ``devcluster.nodes`` writes the status once at registration
(capacity, allocatable, nodeInfo, the Ready condition) and lifts the not-ready taint; KWOK only
refreshes heartbeat times and the Lease (status patches, which cannot touch metadata); the agents
own the labels and annotations they publish. Nothing here marks a node NotReady.

A deleted or evicted pod is not KWOK's to remove: ``devcluster.terminations`` (in the nodes'
process) removes it a second later with its UID as the delete's precondition, as a kubelet does.
KWOK's stage ``delete`` (v0.8.0; unchanged on its main branch) deletes by name from a queue keyed
by name, so a delete it queued for a pod already gone landed on a pod re-created under that name
within the second — a StatefulSet's replica, a re-created gang member.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path
from typing import Final

from devcluster.nodes import SIMULATED_LABEL
from devcluster.processes import alive, spawn, stop_group

STAGES_DIR: Final = Path(__file__).resolve().parent / "kwok"
MANAGED_NODES: Final = f"{SIMULATED_LABEL}=true"
"""KWOK's ``--manage-nodes-with-label-selector``: the nodes ``devcluster.nodes`` registers."""
NODE_LEASE_SECONDS: Final = 40
POD_CIDR: Final = "10.64.0.0/10"
NODE_IP: Final = "10.255.0.1"
_STATE_FILE: Final = "kwok.json"
LOG_FILE: Final = "kwok.log"
RENDERED_DIR: Final = "kwok-stages"
JOB_DURATION_S: Final = 30.0
"""How long a Job's pod without ``topos.io/sim-duration`` runs (``up --job-duration``)."""
_JOB_DURATION_TOKEN: Final = "JOB_DURATION_SECONDS"
_DURATION: Final = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|h|m|s)")
_UNIT_S: Final = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


class KubeletError(Exception):
    """KWOK could not be started; the message says why."""


def parse_duration(text: str) -> float:
    """Seconds of a Go duration as ``topos.io/sim-duration`` takes it (``90s``, ``1h30m``,
    ``1.5h``), or a bare ``0``; ``ValueError`` naming the value otherwise."""
    text = text.strip()
    if text == "0":
        return 0.0
    if not text or _DURATION.sub("", text):
        raise ValueError(f"{text!r} is not a duration such as 30s, 10m or 1h30m (or 0)")
    return sum(float(n) * _UNIT_S[unit] for n, unit in _DURATION.findall(text))


def stages() -> list[Path]:
    """Our stage definitions (every ``devcluster/kwok/*.yaml``), as written: templates."""
    return sorted(STAGES_DIR.glob("*.yaml"))


def render_stages(directory: Path, *, job_duration_s: float) -> list[Path]:
    """Write the stages KWOK runs into ``directory`` with ``job_duration_s`` (seconds a Job's pod
    without ``topos.io/sim-duration`` runs; 0: until deleted) filled in; their paths."""
    if job_duration_s < 0:
        raise ValueError(f"the Job run time cannot be negative ({job_duration_s:g}s)")
    directory.mkdir(parents=True, exist_ok=True)
    rendered = []
    for stage in stages():
        path = directory / stage.name
        path.write_text(stage.read_text().replace(_JOB_DURATION_TOKEN, f"{job_duration_s:g}"))
        rendered.append(path)
    return rendered


def kwok_args(
    binary: Path,
    kubeconfig: Path,
    *,
    stage_files: list[Path],
    manage: str,
    node_lease_seconds: int | None = None,
) -> list[str]:
    """KWOK's command line (also the KWOK benchmark's). ``manage`` is a selector flag without
    dashes, e.g. ``manage-nodes-with-label-selector=topos.io/simulated=true``;
    ``node_lease_seconds`` ``None``: KWOK's default, 0: no Leases."""
    lease = (
        ()
        if node_lease_seconds is None
        else (f"--node-lease-duration-seconds={node_lease_seconds}",)
    )
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--manage-all-nodes=false",
        f"--{manage}",
        f"--cidr={POD_CIDR}",
        f"--node-ip={NODE_IP}",
        *lease,
        "--v=WARN",
        *(f"--config={path}" for path in stage_files),
    ]


def start_kubelet(
    *,
    binary: Path | None,
    kubeconfig: Path,
    directory: Path,
    job_duration_s: float = JOB_DURATION_S,
) -> str:
    """Start KWOK in the background for the simulated nodes (outliving this process, like the
    rest of ``devcluster up``); record it in ``directory``; return a summary line."""
    if binary is None:
        raise KubeletError("kwok is not built: run `python -m devcluster.binaries ensure --all`")
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / LOG_FILE
    argv = kwok_args(
        binary,
        kubeconfig,
        stage_files=render_stages(directory / RENDERED_DIR, job_duration_s=job_duration_s),
        manage=f"manage-nodes-with-label-selector={MANAGED_NODES}",
        node_lease_seconds=NODE_LEASE_SECONDS,
    )
    process = spawn(argv, log_path=log, die_with_parent=False)
    (directory / _STATE_FILE).write_text(json.dumps({"pid": process.pid}))
    with contextlib.suppress(Exception):
        process.wait(timeout=1.0)  # fails fast on a bad flag or stage
    if process.poll() is not None:
        (directory / _STATE_FILE).unlink(missing_ok=True)
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise KubeletError(f"kwok exited with status {process.returncode}: {' | '.join(tail)}")
    jobs = (
        f"a Job's pods after {job_duration_s:g}s unless annotated"
        if job_duration_s
        else "a Job's pods run until deleted unless annotated"
    )
    return (
        f"devcluster: KWOK plays the kubelet of the simulated nodes (pid {process.pid}; "
        f"pods Running, `topos.io/sim-duration: 10m` completes one, {jobs}; log: {log})"
    )


def stop_kubelet(*, directory: Path) -> None:
    """Stop the KWOK process recorded in ``directory`` (nothing if none)."""
    state = directory / _STATE_FILE
    try:
        pid = int(json.loads(state.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        state.unlink(missing_ok=True)
        return
    if alive(pid) and _runs_kwok(pid):
        stop_group(pid, grace_s=5.0)
    state.unlink(missing_ok=True)
    shutil.rmtree(directory / RENDERED_DIR, ignore_errors=True)


def _runs_kwok(pid: int) -> bool:
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except OSError:
        return False
    return Path(argv0).name == "kwok"
