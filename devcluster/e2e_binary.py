"""Upstream's e2e test binary (``k8s.io/kubernetes/test/e2e``, the one the conformance run
drives): find it, or build it once from the Go module of the control plane's version.

``python -m devcluster.e2e_binary ensure`` makes ``e2e.test`` available and prints its path. First
match wins:

1. ``$TOPOS_E2E_TEST``: an ``e2e.test`` binary (nothing is built; a missing file is an error).
2. The cache ``~/.cache/topos/e2e/v<KUBERNETES_VERSION>/e2e.test`` (next to the Kubernetes
   binaries' cache, :func:`devcluster.binaries.cache_root`), filled on first use by ``go test -c
   k8s.io/kubernetes/test/e2e`` inside the same wrapper module that builds the control plane's
   binaries (``devcluster.binaries.kubernetes_wrapper_go_mod``: the staging modules pinned to
   their published ``v0.X.Y``). A cold build on a busy two-core machine takes tens of minutes —
   the binary links most of Kubernetes — so it is built once and kept.

The build is serialised by a file lock in the cache and atomic (the binary appears under its
final name only when complete), as for the other binaries. Nothing is written into the repository.
The binary is run directly (ginkgo's own flags are ``--ginkgo.*``), serially: no ginkgo CLI.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from devcluster.binaries import (
    KUBERNETES_VERSION,
    BinariesUnavailable,
    _executable,
    _go,
    _go_env,
    _install,
    _kube_ldflags,
    _locked,
    _module_download,
    _run_go,
    cache_root,
    kubernetes_wrapper_go_mod,
)

BINARY = "e2e.test"
PACKAGE = "k8s.io/kubernetes/test/e2e"
#: A command the wrapper module names as a ``tool``, only so that ``go mod tidy`` keeps
#: k8s.io/kubernetes required (the test package itself is no import of the module).
_ANCHOR = ("kube-scheduler",)


def cache_dir() -> Path:
    return cache_root().parent / "e2e" / f"v{KUBERNETES_VERSION}"


def find() -> Path | None:
    """The e2e binary if present (``$TOPOS_E2E_TEST`` or the cache); never builds."""
    override = os.environ.get("TOPOS_E2E_TEST")
    if override:
        path = Path(override).expanduser()
        if not _executable(path):
            raise BinariesUnavailable(f"$TOPOS_E2E_TEST is set but {path} is not an executable")
        return path
    cached = cache_dir() / BINARY
    return cached if _executable(cached) else None


def ensure(*, log: bool = True) -> Path:
    """The e2e binary, built into the cache first if missing. Raises ``BinariesUnavailable``
    when Go is missing or the build fails."""
    found = find()
    if found is not None:
        return found
    target = cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    with _locked(target / ".lock"):
        if not _executable(target / BINARY):  # another process may have built it meanwhile
            _build(target, log=log)
    return target / BINARY


def _build(target: Path, *, log: bool) -> None:
    go = _go()
    env = _go_env()
    started = time.monotonic()
    if log:
        print(
            f"e2e: building {PACKAGE} v{KUBERNETES_VERSION} (go test -c; a cold build takes "
            "tens of minutes)",
            file=sys.stderr,
            flush=True,
        )
    with tempfile.TemporaryDirectory(prefix="build-", dir=target) as scratch:
        work = Path(scratch)
        info = _module_download(go, f"k8s.io/kubernetes@v{KUBERNETES_VERSION}", cwd=work, env=env)
        upstream = Path(info["GoMod"]).read_text()
        (work / "go.mod").write_text(
            kubernetes_wrapper_go_mod(upstream, KUBERNETES_VERSION, _ANCHOR)
        )
        _run_go(go, ["mod", "tidy"], cwd=work, env=env)
        _run_go(
            go,
            [
                "test",
                "-c",
                "-vet=off",  # upstream's tests, vetted upstream; vet would add minutes here
                "-trimpath",
                "-ldflags",
                _kube_ldflags(KUBERNETES_VERSION),
                "-o",
                str(work / BINARY),
                PACKAGE,
            ],
            cwd=work,
            env=env,
        )
        _install(work / BINARY, target)
    if log:
        print(f"e2e: built in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.e2e_binary")
    parser.add_argument("command", choices=["ensure", "find"])
    args = parser.parse_args(argv)
    try:
        path = ensure() if args.command == "ensure" else find()
    except BinariesUnavailable as exc:
        print(f"e2e: {exc}", file=sys.stderr)
        return 1
    if path is None:
        print(f"e2e: not built (python -m devcluster.e2e_binary ensure): {cache_dir()}")
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
