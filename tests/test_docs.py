"""The docs: README.md stays a landing page, the MkDocs site builds strictly, and every relative
link in README.md and docs/ names a file (and, from the README, a heading) that exists."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 150

# [text](target) and [label]: target, outside code; a target may carry a "title".
INLINE_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
FENCE = re.compile(r"^(\s*)(```|~~~).*?^\1\2\s*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """``text`` without fenced code blocks and code spans, where a link is not a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def relative_links(text: str) -> list[str]:
    """Every link target in ``text`` that is not a URL, a mail address or a bare #anchor."""
    body = prose(text)
    targets = INLINE_LINK.findall(body) + REFERENCE_LINK.findall(body)
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and t[0] != "#"]


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def broken_links(page: Path, check_anchors: bool) -> list[str]:
    """``target (why)`` for each relative link of ``page`` that resolves to nothing; with
    ``check_anchors``, also each #anchor into a markdown file that has no such heading."""
    broken = []
    for target in relative_links(page.read_text(encoding="utf-8")):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve()
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif check_anchors and anchor and resolved.suffix == ".md":
            headings = HEADING.findall(FENCE.sub("", resolved.read_text(encoding="utf-8")))
            if anchor not in {github_anchor(h) for h in headings}:
                broken.append(f"{target} (no such heading)")
    return broken


def test_readme_is_a_landing_page():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES})"


def test_every_relative_link_in_readme_and_docs_resolves():
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    broken = [
        f"{page.relative_to(ROOT)}: {link}"
        for page in pages
        for link in broken_links(page, check_anchors=page == README)
    ]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_link_checker_finds_a_missing_file_and_heading(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A heading (`--flag`)\n")
    page.write_text(
        "[ok](there.md#a-heading---flag) [gone](missing.md) [bad](there.md#nope)\n"
        "`[code](missing-too.md)` [web](https://example.org/x.md) [top](#here)\n"
        "```\n[fenced](missing-three.md)\n```\n"
    )
    assert relative_links(page.read_text()) == [
        "there.md#a-heading---flag",
        "missing.md",
        "there.md#nope",
    ]
    assert broken_links(page, check_anchors=True) == [
        "missing.md (no such file)",
        "there.md#nope (no such heading)",
    ]


@pytest.mark.slow
def test_mkdocs_builds_strictly(tmp_path):
    missing = [m for m in ("mkdocs", "material") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"not importable: {', '.join(missing)} (pip install '.[docs]')")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").is_file()


CONFLICT_MARKER = re.compile(r"^(<{7} |={7}$|>{7} )", re.M)


def test_no_tracked_text_file_holds_a_merge_conflict_marker():
    """A merge left half done in a page or a config builds and installs without a word; ruff
    catches one only in Python."""
    files = subprocess.run(
        ["git", "ls-files", "*.md", "*.toml", "*.yml", "*.txt", "*.json", "*.py", "*.cpp", "*.h"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    marked = [
        name
        for name in files
        if (ROOT / name).is_file()
        and CONFLICT_MARKER.search((ROOT / name).read_text(errors="replace"))
    ]
    assert not marked, f"merge conflict markers in: {', '.join(marked)}"
