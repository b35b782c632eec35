"""MkDocs hook: the site's home page is the README itself, not a copy of it.

docs/index.md holds one marker line; on build this hook puts README.md in its place, with each
relative link moved from the repository root (where the README sits) to docs/ (where the page
sits): ``docs/usage/running.md#schedules`` becomes ``usage/running.md#schedules``, and the few
files outside docs/ that the site has under another name are mapped in ``SITE_LINKS``. A link
the site has no page for stops the build with its name, so the README cannot link past the site
unnoticed (tests/test_docs_index.py checks the same without building).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MARKER = "<!-- README.md goes here: docs/hooks/readme_index.py -->"
# Files the README links outside docs/, and what the site has for each.
SITE_LINKS = {
    "benchmarks/README.md": "benchmarks.md",  # included into that page
    "LICENSE": "https://www.apache.org/licenses/LICENSE-2.0",
}
FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.M | re.S)
LINK = re.compile(r"\]\(\s*([^)\s]+)(\s+\"[^\"]*\")?\s*\)")


def site_link(target: str) -> str:
    """Where a README link points on the site; URLs and #anchors are left as they are."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
        return target
    path, hash_, anchor = target.partition("#")
    if path.startswith("docs/"):
        return path.removeprefix("docs/") + hash_ + anchor
    if path in SITE_LINKS:
        return SITE_LINKS[path] + hash_ + anchor
    raise ValueError(
        f"README.md links {target!r}, which the docs site has no page for: link a page under "
        f"docs/, or map it in SITE_LINKS of {Path(__file__).relative_to(ROOT)}"
    )


def readme_for_site(text: str) -> str:
    """The README with every relative link outside code blocks pointing where the site has it."""
    out, pos = [], 0
    for block in FENCE.finditer(text):
        out.append(LINK.sub(_moved, text[pos : block.start()]))
        out.append(block.group(0))
        pos = block.end()
    out.append(LINK.sub(_moved, text[pos:]))
    return "".join(out)


def _moved(match: re.Match[str]) -> str:
    return f"]({site_link(match.group(1))}{match.group(2) or ''})"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != "index.md":
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/index.md has lost its marker line {MARKER!r}")
    return markdown.replace(MARKER, readme_for_site(README.read_text(encoding="utf-8")))
