"""kube-controller-manager for the local control plane: the controllers DRA and workloads need.

It runs as ``kubeadm`` runs it — its own client certificate (user
``system:kube-controller-manager``) and ``--use-service-account-credentials``, so each controller
acts as its own service account under the bootstrap RBAC roles — with leader election off, the
control plane's service-account signing key and root CA, and HTTPS (health only) on a free
127.0.0.1 port. Only the controllers in ``CONTROLLERS`` run:

- ``resourceclaim``: creates a pod's ResourceClaims from its ResourceClaimTemplates, removes
  finished or deleted pods from ``status.reservedFor``, and deletes the claims it generated;
- ``job``, ``replicaset``, ``deployment``: workloads create their pods;
- ``garbage-collector``: dependents go with their owners (ownerReferences);
- ``device-taint-eviction``: deletes the pods whose claims hold a device tainted ``NoExecute``
  (in its ResourceSlice or by a DeviceTaintRule) that they do not tolerate (KEP-5055);
- ``persistentvolume-binder``: binds PersistentVolumeClaims to PersistentVolumes (a PV the
  scheduler gave a ``claimRef``), and hands a WaitForFirstConsumer claim the scheduler gave
  ``volume.kubernetes.io/selected-node`` to its provisioner;
- ``persistentvolumeclaim-protection``, ``persistentvolume-protection``: remove the
  ``kubernetes.io/pvc-protection`` / ``pv-protection`` finalizers the API server puts on every
  claim and volume, once no pod uses it, so that a deleted claim or PV goes (without them a
  ``kubectl delete pvc`` stays Terminating for good).

``topos devcluster up`` (``PLAYGROUND``) adds ``statefulset`` — the tests' shared control plane
does not, where tests stand in for a StatefulSet's replicas themselves.

Left out on purpose: node lifecycle, taint eviction and pod GC (the simulated nodes have no
kubelet, so they would be tainted ``unreachable`` and their pods evicted or deleted), and
everything else nothing here uses (each controller costs CPU on a small machine).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Final

from devcluster import pki
from devcluster.processes import wait_https_ok

USER: Final = "system:kube-controller-manager"
KUBECONFIG_FILE: Final = "controller-manager.kubeconfig"
LOG_NAME: Final = "kube-controller-manager"
CONTROLLERS: Final = (
    "resourceclaim-controller",
    "job-controller",
    "replicaset-controller",
    "deployment-controller",
    "garbage-collector-controller",
    "device-taint-eviction-controller",
    "persistentvolume-binder-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
)
PLAYGROUND: Final = (*CONTROLLERS, "statefulset-controller")
"""What ``topos devcluster up`` runs: StatefulSets make their pods too."""


class ControllersError(Exception):
    """kube-controller-manager did not become healthy; the message says why."""


def write_kubeconfig(root: Path, server: str) -> Path:
    """kube-controller-manager's own kubeconfig (client certificate for ``USER``)."""
    pki_dir = root / "pki"
    ca = pki.load_ca(pki_dir)
    path = root / KUBECONFIG_FILE
    pki.write_kubeconfig(
        path, server=server, ca=ca.certificate, client=pki.make_client_cert(ca, USER), user=USER
    )
    return path


def args(
    binary: Path, root: Path, *, server: str, port: int, controllers: tuple[str, ...]
) -> list[str]:
    """The command line; writes the kubeconfig it names."""
    pki_dir = root / "pki"
    kubeconfig = write_kubeconfig(root, server)
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--use-service-account-credentials=true",
        "--leader-elect=false",
        f"--controllers={','.join(controllers)}",
        f"--service-account-private-key-file={pki_dir / 'service-account.key'}",
        f"--root-ca-file={pki_dir / 'ca.crt'}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={pki_dir / 'controller-manager'}",
        "--profiling=false",
        "--v=1",
    ]


def wait_healthy(process: subprocess.Popen[bytes], port: int, log: Path, timeout_s: float) -> None:
    """Return once ``/healthz`` answers ``ok``; ``ControllersError`` if it exits or times out."""
    failure = wait_https_ok(process.poll, port, "/healthz", timeout_s=timeout_s)
    if failure is not None:
        raise ControllersError(
            f"kube-controller-manager {failure} while starting; last log lines ({log}):\n"
            + tail(log)
        )


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file, or ``(no log)``."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
