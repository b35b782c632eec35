"""No function of the package (runtime/, profiling/, commands/, src/) is longer than 60 lines, its
signature and docstring included: a longer one is split into named steps."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("runtime", "profiling", "commands", "src")
MAX_LINES = 60
BENCHMARKS = ("benchmarks",)  # the benchmark scripts are held to the same limit


def long_functions(text: str, where: str) -> list[str]:
    """``where:line name (N lines)`` of every function in ``text`` over MAX_LINES."""
    found = []
    for node in ast.walk(ast.parse(text, where)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if lines > MAX_LINES:
                found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_60_lines():
    found = [
        long
        for source in (*SOURCES, *BENCHMARKS)
        for path in sorted((ROOT / source).rglob("*.py"))
        for long in long_functions(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not found, "functions over 60 lines: " + "; ".join(found)


def test_the_check_finds_a_long_method():
    body = "".join(f"        x = {i}\n" for i in range(MAX_LINES))
    text = f"class A:\n    def long(self):\n{body}\n    def short(self):\n        pass\n"
    assert long_functions(text, "a.py") == [f"a.py:2 long ({MAX_LINES + 1} lines)"]
