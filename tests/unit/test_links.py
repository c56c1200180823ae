"""Every link between the notebooks, README.md and docs/ resolves: the file it names exists, and the section
it names (``#anchor``) is a heading of that file, as GitHub and JupyterLab make anchors from headings. A page
renamed or a heading reworded fails here, not in a reader's browser (issue 48, "claims that cannot drift")."""
from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from scripts.paths import REPO_ROOT

LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def markdown_of(path: Path) -> str:
    """A page's markdown, or a notebook's markdown cells joined; code fences left out (no links there)."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    else:
        text = path.read_text()
    return FENCE.sub("", text)


def slug(title: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped (hyphens and underscores
    kept), each space a hyphen."""
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link in a heading: its text
    title = title.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", title).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    titles = [m.group("title") for m in HEADING.finditer(markdown_of(path))]
    seen: dict[str, int] = {}
    out = set()
    for title in titles:  # GitHub numbers repeated headings: name, name-1, ...
        base = slug(title)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def sources() -> list[Path]:
    pages = [REPO_ROOT / "README.md", REPO_ROOT / "CONTRIBUTING.md", *sorted((REPO_ROOT / "docs").rglob("*.md")),
             *sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))]
    return [p for p in pages if p.is_file()]


def broken_links(path: Path, root: Path = REPO_ROOT) -> list[str]:
    """The links of ``path`` to files of the repository at ``root`` that do not resolve, each with why."""
    problems = []
    for match in LINK.finditer(markdown_of(path)):
        target = match.group("target")
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http(s), mailto: outside this repository
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{target}: no such file {dest.relative_to(root) if dest.is_relative_to(root) else dest}")
        elif anchor and dest.is_file() and dest.suffix in {".md", ".ipynb"} and unquote(anchor).lower() not in anchors(dest):
            problems.append(f"{target}: {dest.name} has no heading with the anchor #{anchor}")
    return problems


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_link_to_a_file_of_the_repository_resolves(path):
    assert broken_links(path) == []


def test_a_renamed_page_and_a_reworded_heading_are_caught(tmp_path):
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Title\n\n## 9. Two topologies, and which stack to pick\n\n## `gpu-vllm`: the engine\n")
    page.write_text("[ok](b.md#9-two-topologies-and-which-stack-to-pick) [ok](b.md#gpu-vllm-the-engine) "
                    "[gone](c.md) [moved](b.md#8-reading-the-dashboard) [web](https://example.org/x.md)\n")
    assert broken_links(page, tmp_path.resolve()) == ["c.md: no such file c.md", "b.md#8-reading-the-dashboard: b.md has no heading with the anchor #8-reading-the-dashboard"]
