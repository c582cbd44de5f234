"""``devcluster up`` installs every CRD in ``deploy/crds/`` (devcluster.crds): the files there must
be CRDs only, and a file that is not says which; an installed wheel carries the same files."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from devcluster import crds


def test_every_file_in_deploy_crds_is_a_crd_up_can_install() -> None:
    found = crds.definitions()
    names = {body["metadata"]["name"] for _, body in found}
    assert "podgroups.scheduling.x-k8s.io" in names
    assert {path.name for path, _ in found} == {p.name for p in crds.CRD_DIR.glob("*.yaml")}


def test_the_crds_are_deploy_crds_and_ship_in_the_wheel() -> None:
    """One source: devcluster reads deploy/crds through its link, and the package data copies
    every file of it into the wheel (so an installed `topos devcluster up` installs them)."""
    repo = Path(__file__).resolve().parents[2]
    assert crds.CRD_DIR.resolve() == (repo / "deploy" / "crds").resolve()
    pyproject = tomllib.loads((repo / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["devcluster"]
    package = Path(crds.__file__).parent
    shipped = {p.name for pattern in patterns for p in package.glob(pattern)}
    assert {p.name for p in (repo / "deploy" / "crds").glob("*.yaml")} <= shipped


def test_a_file_that_is_not_a_crd_is_named(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "metadata: {name: things.example.com}\n"
    )
    (tmp_path / "b.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
    with pytest.raises(crds.CrdError, match=r"b\.yaml: expected CustomResourceDefinition"):
        crds.definitions(tmp_path)


def test_broken_yaml_is_named(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("kind: [unclosed\n")
    with pytest.raises(crds.CrdError, match=r"broken\.yaml"):
        crds.definitions(tmp_path)
