"""argparse stops at the commands: no module of runtime/, profiling/ or the package root reads
parsed arguments. The commands build typed configurations from their flags and pass those down.

Read from the source: any mention of ``argparse.Namespace``, an attribute read on what
``parse_args`` returned (named or not), and a read of ``args.NAME`` (the commands' name for a
Namespace; a dict called args may still use its methods).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BELOW_COMMANDS = (ROOT / "src" / "compile_ahead", ROOT / "runtime", ROOT / "profiling")
PARSE_CALLS = {"parse_args", "parse_known_args", "parse_intermixed_args"}
DICT_METHODS = {name for name in dir(dict) if not name.startswith("_")}


def _is_parse_call(node: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in PARSE_CALLS
    )


def _parsed_names(tree: ast.AST) -> set[str]:
    """Names assigned what a parser's parse_args returned."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and _is_parse_call(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def namespace_reads(source: str) -> list[str]:
    """Where ``source`` mentions argparse.Namespace or reads parsed arguments: 'line: what'."""
    tree = ast.parse(source)
    parsed = _parsed_names(tree) | {"args"}
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and node.attr == "Namespace":
            found.append(f"{line}: argparse.Namespace")
        elif isinstance(node, ast.Name) and node.id == "Namespace":
            found.append(f"{line}: Namespace")
        elif isinstance(node, ast.alias) and node.name == "Namespace":
            found.append(f"{line}: imports Namespace")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "argparse.Namespace" in node.value and "\n" not in node.value:
                found.append(f"{line}: {node.value!r}")  # a quoted annotation
        elif isinstance(node, ast.Attribute) and _is_parse_call(node.value):
            found.append(f"{line}: parse_args().{node.attr}")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in parsed
            and node.attr not in DICT_METHODS
        ):
            found.append(f"{line}: {node.value.id}.{node.attr}")
    return found


def _modules() -> list[Path]:
    return sorted(p for d in BELOW_COMMANDS for p in d.rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_parsed_arguments_below_the_commands(path: Path) -> None:
    found = namespace_reads(path.read_text())
    assert not found, f"{path.relative_to(ROOT)} reads parsed arguments: {'; '.join(found)}"


@pytest.mark.parametrize(
    "source",
    [
        "import argparse\ndef f(args: argparse.Namespace) -> None: ...",
        "def f(args: 'argparse.Namespace') -> None: ...",
        "from argparse import Namespace",
        "def f(args):\n    return args.ladder",
        "def main(p):\n    opts = p.parse_args()\n    return opts.model",
        "def main(p):\n    return p.parse_args().trace",
    ],
)
def test_the_check_finds_parsed_arguments(source: str) -> None:
    assert namespace_reads(source)


@pytest.mark.parametrize(
    "source",
    [
        "def f(args: dict):\n    args.update({'a': 1})\n    return args.get('a')",
        "def main(p):\n    return Options(**vars(p.parse_args()))",
        "def f(config):\n    return config.ladder",
    ],
)
def test_the_check_passes_typed_settings(source: str) -> None:
    assert not namespace_reads(source)


# The trial entry scripts run as their own processes (`python -m ...`) with their own flags.
ENTRY_SCRIPTS = {
    ROOT / "profiling" / "trials" / "schedule_kind" / "upstream_trial.py",
    ROOT / "profiling" / "trials" / "schedule_kind" / "genai_trial.py",
}


def test_no_module_below_the_commands_imports_argparse():
    found = []
    for base in BELOW_COMMANDS:
        for path in sorted(base.rglob("*.py")):
            if path in ENTRY_SCRIPTS:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                if "argparse" in names:
                    found.append(str(path.relative_to(ROOT)))
    assert not found, found
