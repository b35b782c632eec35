"""The package's structure: no import loop at any depth, module by module or package by package,
and every import follows the layers.

The layers, lowest first: the package root (src/compile_ahead: errors, interrupts, standard
streams, the ITT collector's reader, and its output subpackage: atomic writes, output paths),
then runtime/'s packages in the order of RUNTIME_LAYERS, then profiling/ (its subpackages
included; the trials engine below its experiment kinds), then the commands (commands/), which
may import anything and which nothing imports.

Imports are read from the source, at module top and inside functions alike (``TYPE_CHECKING``
blocks aside), and so are imports by name string: ``importlib.import_module("...")``,
``__import__``, ``sys.modules[...]`` lookups and any string that names one of the package's
modules (e.g. a table of modules to import). A module named after ``-m`` in a command line is
another process, not an import.
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
    "compile_ahead.commands": ROOT / "commands",
}
# runtime/'s packages, lowest first: a package imports only packages before it.
RUNTIME_LAYERS = ("base", "model", "graphs", "sources", "compile", "ladder", "baselines", "serving")
COMMANDS = "compile_ahead.commands"


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


def _known(name: str) -> str | None:
    """The module ``name`` is, or is in (a name imported from a module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


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
    return [t for t in map(_known, names) if t and t != module]


def _skipped_nodes(tree: ast.Module) -> set[int]:
    """``TYPE_CHECKING`` blocks, docstrings and the module after a ``-m`` in a command line."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skipped.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.List | ast.Tuple):
            for before, after in itertools.pairwise(node.elts):
                if isinstance(before, ast.Constant) and before.value == "-m":
                    skipped.add(id(after))
    return skipped


def _string_targets(module: str, node: ast.AST) -> list[str]:
    """A string naming one of the package's modules: an import by name string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MODULES:
        return [node.value] if node.value != module else []
    return []


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, (path, is_package) in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        skipped = _skipped_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name].update(_targets(name, is_package, node))
            graph[name].update(_string_targets(name, node))
    return graph


def package_of(module: str) -> str:
    """The package a module belongs to (a package's __init__ is the package itself)."""
    return module if MODULES[module][1] else module.rpartition(".")[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each package one node: an edge wherever a module of one imports a module of another."""
    packages: dict[str, set[str]] = {package_of(m): set() for m in graph}
    for module, targets in graph.items():
        for target in targets:
            if package_of(target) != package_of(module):
                packages[package_of(module)].add(package_of(target))
    return packages


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
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


def _described(graph: dict[str, set[str]], loops: list[list[str]]) -> str:
    return " | ".join(
        "; ".join(f"{a} -> {b}" for a in loop for b in sorted(graph[a]) if b in loop)
        for loop in loops
    )


def test_no_import_loop_at_any_depth():
    graph = import_graph()
    loops = import_loops(graph)
    assert not loops, "import loops: " + _described(graph, loops)


def test_no_loop_between_packages():
    graph = package_graph(import_graph())
    loops = import_loops(graph)
    assert not loops, "package loops: " + _described(graph, loops)


def _tree_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """The import graph of made-up modules (name -> source), read as the package is."""
    graph = {}
    for name, text in sources.items():
        tree = ast.parse(text)
        skipped = _skipped_nodes(tree)
        targets = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets.update(_targets(name, False, node))
            targets.update(_string_targets(name, node))
        graph[name] = targets
    return graph


def test_the_checks_find_the_old_loop_through_the_package_root(monkeypatch):
    """The checks themselves can fail: the loop the commands once closed through the package
    root (the root's dispatcher naming runtime's and profiling's command modules in a table of
    strings, profiling's command importing the root's ``run_command`` inside a function) is
    found at the package level, and a function-level import closes a module loop."""
    modules = {
        "compile_ahead": (Path("__init__.py"), True),
        "compile_ahead.cli": (Path("cli.py"), False),
        "compile_ahead.errors": (Path("errors.py"), False),
        "compile_ahead.runtime": (Path("runtime/__init__.py"), True),
        "compile_ahead.runtime.cli": (Path("runtime/cli/__init__.py"), True),
        "compile_ahead.runtime.cli.run": (Path("runtime/cli/run.py"), False),
        "compile_ahead.profiling": (Path("profiling/__init__.py"), True),
        "compile_ahead.profiling.cli": (Path("profiling/cli.py"), False),
    }
    monkeypatch.setitem(globals(), "MODULES", modules)
    graph = _tree_graph(
        {
            "compile_ahead.cli": (
                'TABLE = ("compile_ahead.runtime.cli.run",)\n'
                "def build():\n    import importlib\n"
                "    return [importlib.import_module(m) for m in TABLE]\n"
            ),
            "compile_ahead.errors": "",
            "compile_ahead.runtime.cli.run": "from compile_ahead.errors import x\n",
            "compile_ahead.profiling.cli": (
                "def main():\n    from compile_ahead.cli import run_command\n"
                'CMD = ["python", "-m", "compile_ahead.runtime.cli.run"]\n'
            ),
            "compile_ahead.runtime.cli": 'import sys\nsys.modules["compile_ahead.profiling.cli"]\n',
            "compile_ahead": "",
            "compile_ahead.runtime": "",
            "compile_ahead.profiling": "",
        }
    )
    assert graph["compile_ahead.cli"] == {"compile_ahead.runtime.cli.run"}  # by string
    assert graph["compile_ahead.profiling.cli"] == {"compile_ahead.cli"}  # "-m" is a process
    assert graph["compile_ahead.runtime.cli"] == {"compile_ahead.profiling.cli"}
    assert import_loops(package_graph(graph)) == [
        ["compile_ahead", "compile_ahead.profiling", "compile_ahead.runtime.cli"]
    ]
    assert import_loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _runtime_layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] == ["compile_ahead", "runtime"] and len(parts) > 3:
        return RUNTIME_LAYERS.index(parts[2])
    return None


def test_every_runtime_package_is_a_layer():
    packages = {p.name for p in (ROOT / "runtime").iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(RUNTIME_LAYERS)


@pytest.mark.parametrize("layer", RUNTIME_LAYERS)
def test_runtime_packages_import_only_lower_layers(layer):
    graph = import_graph()
    rank = RUNTIME_LAYERS.index(layer)
    upward = [
        f"{a} -> {b}"
        for a, targets in graph.items()
        if _runtime_layer(a) == rank
        for b in sorted(targets)
        if (_runtime_layer(b) or 0) > rank or b.startswith(("compile_ahead.profiling", COMMANDS))
    ]
    assert not upward, f"runtime/{layer} imports a higher layer: {upward}"


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_profiling_imports_no_command():
    graph = import_graph()
    upward = [
        f"{a} -> {b}"
        for a, targets in graph.items()
        if _in(a, "compile_ahead.profiling")
        for b in sorted(targets)
        if _in(b, COMMANDS)
    ]
    assert not upward, f"profiling imports the commands: {upward}"


def _in_root(module: str) -> bool:
    """A module of src/compile_ahead: the package root or one of its subpackages (output)."""
    return MODULES[module][0].is_relative_to(PACKAGES["compile_ahead"])


def test_the_package_root_is_the_bottom_layer():
    graph = import_graph()
    root = [m for m in graph if _in_root(m)]
    assert {"compile_ahead.errors", "compile_ahead.output.atomic"} <= set(root)
    upward = [f"{a} -> {b}" for a in root for b in sorted(graph[a]) if not _in_root(b)]
    assert not upward, f"package root modules reaching up: {upward}"


def test_the_trials_engine_imports_no_experiment_kind():
    """The engine (the modules of profiling/trials itself) runs and reports experiments of any
    kind; the kinds (its subpackages) plug into it through the table the callers pass."""
    graph = import_graph()
    engine = "compile_ahead.profiling.trials"
    kinds = [
        f"{a} -> {b}"
        for a, targets in graph.items()
        if package_of(a) == engine
        for b in sorted(targets)
        if _in(b, engine) and package_of(b) != engine
    ]
    assert not kinds, f"the trials engine imports experiment kinds: {kinds}"


def test_nothing_imports_the_commands():
    graph = import_graph()
    into = [
        f"{a} -> {b}"
        for a, targets in graph.items()
        if not _in(a, COMMANDS)
        for b in sorted(targets)
        if _in(b, COMMANDS)
    ]
    assert not into, f"imports of the commands from below: {into}"


def test_no_test_module_imports_another():
    """What two test files share lives in a helper module of tests/ (cli, foreign_models, ...):
    a test module imported by another runs its module-level code twice and ties the two."""
    tests = ROOT / "tests"
    imported = [
        f"{path.name} -> {name}"
        for path in sorted(tests.glob("test_*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
        if name.startswith("test_") and (tests / f"{name}.py").is_file()
    ]
    assert not imported, f"test modules importing test modules: {imported}"
