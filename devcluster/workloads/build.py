"""Find or build a workload controller: ``~/.cache/topos/controllers/<name>/<version>/``.

The cache holds the binary (``<name>``) and, under ``module/``, the files of the module the
harness installs (CRDs, webhook manifests and their patches, objects), so running a controller
needs neither Go nor the module cache. A build downloads the module at its exact version from
the Go module proxy (``go mod download -json``), builds its main package inside the downloaded
module directory (so its own ``go.mod`` and ``go.sum``, replace directives included, decide every
dependency), lean (``CGO_ENABLED=0 -trimpath -ldflags '-s -w'``, the version stamped in where the
project has a variable for it), serialised by a file lock, and atomic: the manifests first, the
binary last under its final name, so a present binary means a complete entry.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from devcluster.binaries import (
    BinariesUnavailable,
    _executable,
    _go,
    _go_env,
    _install,
    _locked,
    _module_download,
    _run_go,
    cache_root,
)
from devcluster.workloads.catalog import Controller


@dataclass(frozen=True, slots=True)
class Built:
    """A controller's cached binary and module files."""

    controller: Controller
    directory: Path

    @property
    def binary(self) -> Path:
        return self.directory / self.controller.name

    @property
    def module(self) -> Path:
        """The module's files the harness installs (same relative paths as in the module)."""
        return self.directory / "module"


def cache_dir(controller: Controller) -> Path:
    return cache_root().parent / "controllers" / controller.name / controller.version


def find(controller: Controller) -> Built | None:
    """The cached build if complete; never builds."""
    built = Built(controller, cache_dir(controller))
    return built if _executable(built.binary) and built.module.is_dir() else None


def ensure(controller: Controller, *, log: bool = True) -> Built:
    """The cached build, made first if missing. ``BinariesUnavailable`` when Go is missing, the
    proxy refuses the module, or the build fails (the message names the module and version)."""
    found = find(controller)
    if found is not None:
        return found
    target = cache_dir(controller)
    target.mkdir(parents=True, exist_ok=True)
    with _locked(target / ".lock"):
        found = find(controller)  # another process may have built it meanwhile
        if found is None:
            _build(controller, target, log=log)
    built = find(controller)
    assert built is not None
    return built


def _say(log: bool, message: str) -> None:
    if log:
        print(f"workloads: {message}", file=sys.stderr, flush=True)


def module_paths(controller: Controller) -> tuple[str, ...]:
    """Every module path the harness reads (CRD directories, manifests, patches)."""
    paths = list(controller.crds) + list(controller.objects) + list(controller.conversion)
    for webhooks in controller.webhooks:
        paths.append(webhooks.path)
        paths += [patch.path for patch in webhooks.patches]
        if webhooks.kustomization:
            paths.append(webhooks.kustomization)
    return tuple(paths)


def _writable(tree: Path) -> None:
    """The module cache's files are read-only; the cache's copies need not be (a rebuild
    replaces them)."""
    for path in (tree, *tree.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _build(controller: Controller, target: Path, *, log: bool) -> None:
    go = _go()
    started = time.monotonic()
    _say(log, f"building {controller.name} (Go module {controller.module_version})")
    with tempfile.TemporaryDirectory(prefix="build-", dir=target) as scratch:
        work = Path(scratch)
        env = _go_env()
        try:
            info = _module_download(go, controller.module_version, cwd=work, env=env)
        except BinariesUnavailable as exc:
            raise BinariesUnavailable(f"{controller.module_version}: {exc}") from exc
        source = Path(info["Dir"])
        staged = work / "module"
        for relative in module_paths(controller):
            path = source / relative
            if not path.exists():
                raise BinariesUnavailable(f"{controller.module_version} has no {relative}")
            destination = staged / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                shutil.copytree(path, destination, dirs_exist_ok=True)
            else:
                shutil.copyfile(path, destination)
        _writable(staged)
        ldflags = "-s -w"
        if controller.version_variable:
            ldflags += f" -X {controller.version_variable}={controller.version}"
        # In the module's own directory (read-only in the module cache): its go.mod and go.sum
        # decide, nothing may change them.
        build_env = dict(env, GOFLAGS="-mod=readonly -buildvcs=false")
        out = work / "out"
        out.mkdir()
        try:
            _run_go(
                go,
                [
                    "build",
                    "-trimpath",
                    "-ldflags",
                    ldflags,
                    "-o",
                    str(out / controller.name),
                    controller.main,
                ],
                cwd=source,
                env=build_env,
            )
        except BinariesUnavailable as exc:
            raise BinariesUnavailable(f"{controller.module_version}: {exc}") from exc
        final_module = target / "module"
        if final_module.exists():
            shutil.rmtree(final_module)
        staged.replace(final_module)
        _install(out / controller.name, target)
    _say(log, f"built {controller.name} {controller.version} in {time.monotonic() - started:.0f}s")
