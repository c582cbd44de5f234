"""Build the C NVML library (``fake_nvml.c``) against NVIDIA's ``nvml.h``, and run programs on it.

The header comes from the ``nvidia-nvml-dev`` wheel (a dev dependency, pinned in pyproject.toml).
The library is compiled with gcc into ``~/.cache/topos/nvmlfake/<digest>/libnvidia-ml.so.1`` —
the digest covers the source, the header and the compiler, so a change rebuilds it — and never
lands in the repository. ``nvml_env(state)`` is the environment that makes the real ``pynvml``
load it: ``pynvml`` opens ``libnvidia-ml.so.1`` through the dynamic loader's search, so
``LD_LIBRARY_PATH`` (read when a process starts) points it here.

``python -m devcluster.nvmlfake.build`` builds and prints the library's directory.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

SOURCE: Final = Path(__file__).with_name("fake_nvml.c")
HEADER_DIST: Final = "nvidia-nvml-dev"
LIBRARY: Final = "libnvidia-ml.so.1"
STATE_ENV: Final = "TOPOS_FAKE_NVML_STATE"


class BuildError(RuntimeError):
    """The library could not be built (no gcc, no nvml.h, a compile error); says which."""


def header_dir() -> Path:
    """The folder holding NVIDIA's ``nvml.h`` from the ``nvidia-nvml-dev`` wheel."""
    try:
        dist = importlib.metadata.distribution(HEADER_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise BuildError(
            f"{HEADER_DIST} is not installed (pip install -e '.[dev]' installs it): it ships"
            " nvml.h, which the fake NVML library is compiled against"
        ) from None
    for entry in dist.files or ():
        if entry.name == "nvml.h":
            return Path(str(dist.locate_file(entry))).parent
    raise BuildError(f"{HEADER_DIST} {dist.version} has no nvml.h")


def cache_root() -> Path:
    base = os.environ.get("TOPOS_CACHE_DIR") or str(Path.home() / ".cache" / "topos")
    return Path(base) / "nvmlfake"


def ensure_library() -> Path:
    """Build the library if this source/header/compiler has not been built yet; its folder."""
    gcc = shutil.which(os.environ.get("CC", "gcc"))
    if gcc is None:
        raise BuildError("gcc is not installed: the fake NVML library is compiled with it")
    include = header_dir()
    version = subprocess.run([gcc, "--version"], capture_output=True, text=True, check=False)
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    digest.update((include / "nvml.h").read_bytes())
    digest.update(version.stdout.encode())
    folder = cache_root() / digest.hexdigest()[:16]
    library = folder / LIBRARY
    if library.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{LIBRARY}.{os.getpid()}"
    command = [
        gcc,
        "-std=c11",
        "-D_GNU_SOURCE",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fPIC",
        "-shared",
        f"-I{include}",
        f"-Wl,-soname,{LIBRARY}",
        "-o",
        str(tmp),
        str(SOURCE),
        "-lpthread",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"compiling {SOURCE.name} failed:\n{done.stderr.strip()}")
    os.replace(tmp, library)
    return folder


def nvml_env(state: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) plus what makes ``pynvml`` load the
    library and the library read ``state``."""
    env = dict(os.environ if base is None else base)
    folder = ensure_library()
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(folder), env.get("LD_LIBRARY_PATH", "")) if p
    )
    env[STATE_ENV] = str(state)
    return env


def main() -> int:
    try:
        print(ensure_library())
    except BuildError as exc:
        print(f"nvmlfake: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
