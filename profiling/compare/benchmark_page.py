"""The compare page of a benchmark's result file (a script under benchmarks/ run with --json):
what ran, with which options, and every measured value as a sortable, filterable table.

A result file is one JSON object marked ``"kind": "compile-ahead.benchmark"`` with a layout
``"version"``, the script's name, its options and its results (benchmarks/_shared/results.py
writes it; benchmarks/README.md describes it).
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.compare import html as h
from compile_ahead.profiling.compare.html import Column, Row

KIND = "compile-ahead.benchmark"
VERSION = 1  # the layout this reader knows; a file of a later version is refused in one line
_HEAD_BYTES = 512  # the marker is the object's first key


def is_benchmark_result(path: Path) -> bool:
    """Whether ``path`` is a JSON file that starts with the benchmark result's marker."""
    if not (path.is_file() and path.suffix == ".json"):
        return False
    try:
        with path.open("rb") as f:
            head = f.read(_HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return False
    return f'"kind": "{KIND}"' in head


def load(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CompileAheadError(f"{path}: unreadable ({err})") from None
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise CompileAheadError(f"{path}: not a benchmark result")
    version = document.get("version")
    if version != VERSION:
        raise CompileAheadError(
            f"{path}: a benchmark result of layout version {version!r}; this reads {VERSION}"
        )
    return document


def leaves(value: Any, where: str = "") -> list[tuple[str, Any]]:
    """Every scalar in ``value`` with its path (``a.b[2].c``), in document order."""
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in leaves(v, f"{where}.{k}" if where else k)]
    if isinstance(value, list):
        return [kv for i, v in enumerate(value) for kv in leaves(v, f"{where}[{i}]")]
    return [(where, value)]


def _cell(value: Any) -> h.Cell:
    if isinstance(value, int) and not isinstance(value, bool):
        return h.number(value, str(value))
    if isinstance(value, float):
        return h.number(value)
    return h.text("null" if value is None else value)


def render(path: Path, document: dict[str, Any]) -> str:
    name = str(document.get("benchmark", "?"))
    title = f"benchmark: {name}"
    given = document.get("args")
    args: dict[str, Any] = given if isinstance(given, dict) else {}
    facts = {
        "benchmark": name,
        "layout version": str(document.get("version")),
        "options": " ".join(f"--{k.replace('_', '-')}={v}" for k, v in args.items()) or "none",
    }
    rows = [
        Row([h.text(key), _cell(value)], {"data-name": key.lower()})
        for key, value in leaves(document.get("results"))
    ]
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">{escape(str(path.resolve()))}</p>',
        h.facts(facts),
        "<h2>Results</h2>",
        h.filters("results-table", len(rows), flagged=False, what="values"),
        h.table([Column("Value of"), Column("Measured", True)], rows, "results-table"),
    ]
    return h.document(title, "\n".join(body))
