"""mypy finds no error in the typed folders of the package, checked the way the wheel maps
them (.ci/typecheck.py) with the repository's [tool.mypy] config."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
TYPECHECK = ROOT / ".ci" / "typecheck.py"
# The folders that must type-check clean; the rest of the package joins as it is cleaned.
TYPED_FOLDERS = ["runtime"]


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
