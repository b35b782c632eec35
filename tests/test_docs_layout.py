"""docs/architecture/layout.md names every module of the package: each .py file under runtime/,
profiling/, commands/ and src/compile_ahead/, so a module added without a word there fails.

layout.md has one section per folder (a heading naming it in backticks, e.g. "The runtime
(`runtime/`)"). Within its folder's section a module is named in one entry (a table row, a list
item or a paragraph) by code spans in order: its packages below the folder, each with a slash,
then its name without .py. `runtime/ladder/reporting/events.py` is named by an entry holding
`ladder/`, then `reporting/`, then `events`; `commands/run.py` by an entry holding `commands/`,
then `run`. A package's `__init__.py` is named with its package (`ladder/`); the folder's own by
its section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / "docs" / "architecture" / "layout.md"
FOLDERS = ("src/compile_ahead", "runtime", "profiling", "commands")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
HEADING = re.compile(r"^#{1,6}\s.*$", re.M)
# A table row, a list item or a paragraph: each starts a new entry.
ENTRY_START = re.compile(r"^(?:\|(?!\s*-)|\s*[-*]\s|\s*\d+\.\s|\s*$)")


def modules(folder: str) -> list[tuple[str, ...]]:
    """Each module under ``folder`` as its path parts below it: ("ladder", "runner.py")."""
    base = ROOT / folder
    return sorted(
        p.relative_to(base).parts for p in base.rglob("*.py") if "__pycache__" not in p.parts
    )


def sections(text: str) -> dict[str, str]:
    """The text under each heading that names a folder in backticks, up to the next such one."""
    found: dict[str, str] = {}
    heads = [(m.start(), m.group(0)) for m in HEADING.finditer(text)]
    for i, (start, head) in enumerate(heads):
        named = [f for f in FOLDERS if f"`{f}/`" in head]
        if not named:
            continue
        end = next(
            (s for s, h in heads[i + 1 :] if any(f"`{f}/`" in h for f in FOLDERS)), len(text)
        )
        found[named[0]] = text[start:end]
    return found


def entries(section: str) -> list[list[str]]:
    """The code spans of each entry (table row, list item, paragraph) of ``section``, in order."""
    out: list[list[str]] = []
    current: list[str] = []
    for line in section.splitlines():
        if ENTRY_START.match(line) and current:
            out.append(current)
            current = []
        current += CODE_SPAN.findall(line)
    if current:
        out.append(current)
    return out


def in_order(spans: list[str], wanted: list[str]) -> bool:
    """Whether ``wanted`` occur among ``spans`` in that order (others may come between)."""
    it = iter(spans)
    return all(any(s == w for s in it) for w in wanted)


def wanted_spans(folder: str, parts: tuple[str, ...]) -> list[str] | None:
    """The code spans that name a module, in order; None for the folder's own __init__.py."""
    *packages, name = parts
    stem = name.removesuffix(".py")
    spans = [f"{p}/" for p in packages]
    if stem == "__init__":
        return spans or None
    return (spans or [f"{folder}/"]) + [stem]


def unnamed(text: str) -> list[str]:
    """Each module of the package that ``text`` (a layout.md) does not name, as a path."""
    by_folder = sections(text)
    missing = []
    for folder in FOLDERS:
        section_entries = entries(by_folder.get(folder, ""))
        for parts in modules(folder):
            wanted = wanted_spans(folder, parts)
            if wanted is None:
                continue
            if not any(in_order(spans, wanted) for spans in section_entries):
                missing.append("/".join((folder, *parts)))
    return missing


def test_layout_has_a_section_per_folder():
    found = sections(LAYOUT.read_text(encoding="utf-8"))
    assert sorted(found) == sorted(FOLDERS), f"sections found: {sorted(found)}"


def test_layout_names_every_module():
    missing = unnamed(LAYOUT.read_text(encoding="utf-8"))
    assert not missing, (
        "docs/architecture/layout.md does not name these modules (an entry of their folder's "
        "section with their package, then their name, in backticks):\n  " + "\n  ".join(missing)
    )


@pytest.mark.parametrize(
    ("spans", "wanted", "named"),
    [
        (["ladder/", "config", "reporting/", "events"], ["ladder/", "reporting/", "events"], True),
        (["ladder/", "events", "reporting/"], ["ladder/", "reporting/", "events"], False),
        (["compile/", "cache"], ["ladder/", "cache"], False),
        (["commands/", "main", "run"], ["commands/", "run"], True),
    ],
)
def test_a_module_is_named_by_its_packages_then_its_name(spans, wanted, named):
    assert in_order(spans, wanted) is named


def test_the_check_finds_a_module_layout_leaves_out():
    text = LAYOUT.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `ladder/`"))
    assert "`runner`" in row
    assert "runtime/ladder/runner.py" in unnamed(
        text.replace(row, row.replace("`runner`", "runner"))
    )
