"""Every file or folder of the repository that README.md or a page of docs/ names exists: a
backticked path (`tests/e2e_gangs/`, `coordinator/core/registry.py:42`) and a relative link
(`[gangs](gangs.md#anchor)`). A page that names a path someone moved or deleted fails here, with
the page, the line and the path, instead of misleading its next reader."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# benchmarks-history.md records past rounds, with the paths of their day: it is not checked.
PAGES = sorted(
    [ROOT / "README.md", *(p for p in (ROOT / "docs").glob("*.md") if "history" not in p.name)]
)
# The repository's top-level entries: a backticked token starting with one of them is a path.
TOP = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")} | {".ci"}
TOP -= {"topos.egg-info"}
BACKTICKED = re.compile(r"`([^`\s]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A placeholder, a glob or an example, not a path: `docs/<page>.md`, `tests/**/test_*.py`, `a/…`.
NOT_A_PATH = re.compile(r"[<>*{}…$|]|\.\.\.")


def _repo_path(token: str) -> str | None:
    """The repository path ``token`` names (without a line number, anchor or test id), or None
    when it is not one."""
    path = re.split(r"::|#|:(?=\d)", token, maxsplit=1)[0].rstrip(".,;:)")
    if NOT_A_PATH.search(path) or ("/" not in path and path not in TOP):
        return None
    if path.split("/", 1)[0] not in TOP:
        return None
    return path


def _named(page: Path) -> list[tuple[int, str, Path]]:
    """(line, as written, where it points) for every repository path ``page`` names."""
    out: list[tuple[int, str, Path]] = []
    in_code = False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:  # commands and outputs: their paths are the machine's, not the repository's
            continue
        for token in BACKTICKED.findall(line):
            path = _repo_path(token)
            if path is not None:
                out.append((number, token, ROOT / path))
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL or an anchor in the same page
            path = target.split("#", 1)[0]
            if path and not NOT_A_PATH.search(path):
                out.append((number, target, (page.parent / path).resolve()))
    return out


def test_every_path_the_docs_name_exists() -> None:
    missing = [
        f"{page.relative_to(ROOT)}:{number}: {written}"
        for page in PAGES
        for number, written, target in _named(page)
        if not target.exists()
    ]
    assert missing == [], "\n".join(missing)


def test_the_check_sees_paths_and_links() -> None:
    """The check above cannot pass by finding nothing: it finds the paths of this page's kind."""
    testing = ROOT / "docs" / "testing.md"
    named = [written for _, written, _ in _named(testing)]
    assert "devcluster/churn" in named  # a backticked folder
    assert _repo_path("docs/<page>.md") is None  # a placeholder is no path
    assert _repo_path("coordinator/core/registry.py:42") == "coordinator/core/registry.py"
    assert _repo_path("tests/x/test_y.py::test_z") == "tests/x/test_y.py"
    assert len([n for n in named if "/" in n]) > 10
