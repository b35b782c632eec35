"""mypy finds no error in the typed folders of the package, checked the way the wheel maps
them (.ci/typecheck.py) with the repository's [tool.mypy] config."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
TYPECHECK = ROOT / ".ci" / "typecheck.py"
# The folders that must type-check clean; the rest of the package joins as it is cleaned.
TYPED_FOLDERS = ["runtime", "profiling", "commands", "src"]


def _typecheck_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("typecheck", TYPECHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_typed_folders_have_no_mypy_errors() -> None:
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install '.[test]'")
    done = subprocess.run(
        [sys.executable, str(TYPECHECK), *TYPED_FOLDERS],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_native_module_has_a_stub_in_the_package() -> None:
    """mypy reads a compiled module (ext/, installed into compile_ahead) through the .pyi stub
    beside the package's sources, which the wheel ships with the rest of src/compile_ahead."""
    built = {
        name
        for cmake in (ROOT / "ext").rglob("CMakeLists.txt")
        for name in re.findall(r"^compile_ahead_module\((\w+)", cmake.read_text(), re.MULTILINE)
    }
    assert built >= {"_native", "_itt", "_depsort", "_perfcounters"}
    stubs = {p.stem for p in (ROOT / "src" / "compile_ahead").glob("_*.pyi")}
    assert built <= stubs, f"compiled modules without a stub: {sorted(built - stubs)}"


# What stubtest reports that is no mismatch: names only the stubs define (type aliases, a
# TypedDict), pybind11's own metaclass, and Trace, which Python cannot construct at all.
STUBTEST_ALLOWED = r"""
compile_ahead\._itt\.(EventTuple|AggregateTuple)
compile_ahead\._perfcounters\.Reading
compile_ahead\._depsort\.(DepsModel|Trace)
compile_ahead\._perfcounters\.CounterWindow
compile_ahead\._depsort\.Trace\.__init__
"""


def test_native_stubs_match_the_built_modules(tmp_path: Path) -> None:
    """mypy's stubtest: every function, class and method of a built module is in its stub, and
    the stub names nothing the module lacks. (pybind11's functions carry no signature Python
    can read, so their parameters follow the module.cpp definitions in ext/.)"""
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install '.[test]'")
    pytest.importorskip("compile_ahead._itt", reason="the native modules are not built")
    stubs = tmp_path / "stubs" / "compile_ahead"
    stubs.mkdir(parents=True)
    (stubs / "__init__.pyi").write_text("")
    names = []
    for stub in sorted((ROOT / "src" / "compile_ahead").glob("_*.pyi")):
        shutil.copy(stub, stubs / stub.name)
        names.append(f"compile_ahead.{stub.stem}")
    allowlist = tmp_path / "allowlist.txt"
    allowlist.write_text(STUBTEST_ALLOWED)
    # _native finds libopenvino through the wheel's layout; openvino loaded first provides it
    # wherever the module was built.
    stubtest = "import openvino, runpy; runpy.run_module('mypy.stubtest', run_name='__main__')"
    done = subprocess.run(
        [sys.executable, "-c", stubtest, "--allowlist", str(allowlist), *names],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(stubs.parent)},
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_folder_holding_mapped_ones_stands_for_them() -> None:
    """`typecheck.py src` checks src/compile_ahead (the folder src is not itself mapped)."""
    typecheck = _typecheck_module()
    packages = typecheck.package_map()
    named = [ROOT / "src", ROOT / "runtime" / "ladder"]
    assert typecheck.mapped_within(named, packages) == [
        ROOT / "src" / "compile_ahead",
        ROOT / "runtime" / "ladder",
    ]


def test_errors_are_named_by_their_path_in_the_repository(tmp_path: Path) -> None:
    """The mapped tree's paths (compile_ahead/runtime/...) come back as runtime/...: an error
    names the file to open."""
    typecheck = _typecheck_module()
    packages = typecheck.package_map()
    typecheck.build_tree(tmp_path, packages)
    shown = "compile_ahead/runtime/ladder/config.py"
    assert typecheck.repo_path(tmp_path, shown) == "runtime/ladder/config.py"
    assert typecheck.repo_path(tmp_path, "compile_ahead/errors.py") == "src/compile_ahead/errors.py"
    output = f"{shown}:12: error: something  [arg-type]\ncompile_ahead/errors.py:3: error: x"
    only_runtime = typecheck.in_repo(tmp_path, output, [ROOT / "runtime"])
    assert only_runtime == ["runtime/ladder/config.py:12: error: something  [arg-type]"]
