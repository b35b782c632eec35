"""The package's structure: no import loop at any depth, and every import follows the layers.

Imports are read from the source (module top and inside functions alike; ``TYPE_CHECKING``
blocks aside), so a loop closed through a convenience import inside a function counts.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "compile_ahead": ROOT / "src" / "compile_ahead",
    "compile_ahead.runtime": ROOT / "runtime",
    "compile_ahead.profiling": ROOT / "profiling",
}
# runtime/'s packages, lowest first: a package imports only packages before it.
RUNTIME_LAYERS = ("base", "model", "graphs", "sources", "compile", "ladder", "baselines", "cli")
# The package root is the bottom layer (errors, atomic writes, the ITT collector's reader) and
# the commands; only the commands import the runtime and profiling.
ROOT_COMMANDS = {"compile_ahead.cli", "compile_ahead.patches_check"}


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for package, directory in PACKAGES.items():
        for path in directory.rglob("*.py"):
            parts = list(path.relative_to(directory).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            name = ".".join([package, *(parts[:-1] if is_package else parts)])
            found[name] = (path, is_package)
    return found


MODULES = _modules()


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")[: len(module.split(".")) - (0 if is_package else 1)]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([node.module] if node.module else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    targets = []
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            targets.append(name)
    return targets


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, (path, is_package) in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        skipped = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skipped:
                graph[name].update(_targets(name, is_package, node))
    return graph


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []
    counter = itertools.count()

    def visit(v: str) -> None:
        index[v] = low[v] = next(counter)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                loops.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return loops


def test_no_import_loop_at_any_depth():
    graph = import_graph()
    loops = import_loops(graph)
    described = [
        "; ".join(f"{a} -> {b}" for a in loop for b in sorted(graph[a]) if b in loop)
        for loop in loops
    ]
    assert not loops, "import loops: " + " | ".join(described)


def test_the_loop_finder_finds_a_loop_inside_a_function():
    """The check itself can fail: a function-level import that closes a loop is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_loops(graph) == [["a", "b", "c"]]
    tree = ast.parse("def f():\n    from compile_ahead.runtime.cli import options\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert _targets("compile_ahead.runtime.base.precision", False, node) == [
        "compile_ahead.runtime.cli.options"
    ]


def _runtime_layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] == ["compile_ahead", "runtime"] and len(parts) > 3:
        return RUNTIME_LAYERS.index(parts[2])
    return None


@pytest.mark.parametrize("layer", RUNTIME_LAYERS)
def test_runtime_packages_import_only_lower_layers(layer):
    graph = import_graph()
    rank = RUNTIME_LAYERS.index(layer)
    upward = [
        f"{a} -> {b}"
        for a, targets in graph.items()
        if _runtime_layer(a) == rank
        for b in sorted(targets)
        if (_runtime_layer(b) or 0) > rank or b.startswith("compile_ahead.profiling")
    ]
    # The commands (cli) may put a run on a trace; nothing else in the runtime reaches up.
    if layer == "cli":
        upward = [u for u in upward if "compile_ahead.profiling" not in u]
    assert not upward, f"runtime/{layer} imports a higher layer: {upward}"


def test_the_package_root_is_the_bottom_layer_and_the_commands():
    graph = import_graph()
    upward = [
        f"{a} -> {b}"
        for a, targets in graph.items()
        if a.count(".") == 1 and a not in ROOT_COMMANDS
        for b in sorted(targets)
        if b.startswith(("compile_ahead.runtime", "compile_ahead.profiling"))
    ]
    assert not upward, f"package root modules reaching up: {upward}"
