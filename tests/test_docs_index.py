"""The site's home page is README.md itself (docs/hooks/readme_index.py puts it in place of
docs/index.md's marker line), every README link lands on a page of the site, and the README's
code blocks fit the docs column."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
COLUMN = 80  # characters of a code block the docs column shows without scrolling
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```\s*$", re.M | re.S)


def load_hook():
    spec = importlib.util.spec_from_file_location(
        "readme_index", DOCS / "hooks" / "readme_index.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_index_is_the_readme_not_a_copy():
    hook = load_hook()
    assert (DOCS / "index.md").read_text(encoding="utf-8").strip() == hook.MARKER


def test_every_readme_link_lands_on_the_site():
    hook = load_hook()
    site_text = hook.readme_for_site(README.read_text(encoding="utf-8"))
    targets = re.findall(r"\]\(\s*([^)\s]+)", hook.FENCE.sub("", site_text))
    assert targets, "no links found in README.md"
    missing = []
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        if not (DOCS / target.partition("#")[0]).is_file():
            missing.append(target)
    assert not missing, f"README links that name no page of the site: {missing}"


def test_a_readme_link_off_the_site_is_refused_and_code_is_left_alone():
    hook = load_hook()
    text = "[a](docs/usage/running.md#schedules) [b](benchmarks/README.md) [c](https://x.org/y)\n"
    assert hook.readme_for_site(text) == (
        "[a](usage/running.md#schedules) [b](benchmarks.md) [c](https://x.org/y)\n"
    )
    assert hook.readme_for_site("```\n[x](src/a.py)\n```\n") == "```\n[x](src/a.py)\n```\n"
    with pytest.raises(ValueError, match=r"src/a\.py"):
        hook.readme_for_site("[x](src/a.py)\n")


def test_the_readmes_code_blocks_fit_the_docs_column():
    wide = [
        f"{len(line)}: {line}"
        for block in FENCE.findall(README.read_text(encoding="utf-8"))
        for line in block.splitlines()
        if len(line) > COLUMN
    ]
    assert not wide, f"README code lines wider than {COLUMN} characters:\n" + "\n".join(wide)
