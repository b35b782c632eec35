"""Type-check the package with mypy, reporting errors at their real paths in the repository.

The wheel maps four folders into one package (pyproject's ``[tool.scikit-build]``
``wheel.packages``: src/compile_ahead is ``compile_ahead``, runtime/ is ``compile_ahead.runtime``,
and so on), a map mypy cannot read. This builds that package in a temporary directory of
symlinks, runs mypy over it with the repository's ``[tool.mypy]`` config, and prints each error
with its path in the repository.

    python .ci/typecheck.py                  # every mapped folder
    python .ci/typecheck.py runtime profiling
    python .ci/typecheck.py src              # a folder holding mapped ones: those

Only errors in the folders named are printed (mypy also checks what they import). Exit status:
0 when there are none, 1 when there are, 2 when mypy could not run.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A mypy message line: path:line: severity: text (column numbers off in our config).
MESSAGE = re.compile(r"^(?P<path>[^:\s]+\.pyi?):(?P<rest>\d+: (?:error|note): .*)$")


def package_map(root: Path = ROOT) -> dict[str, Path]:
    """The wheel's map: a package's path in the tree (``compile_ahead/runtime``) to its folder."""
    with open(root / "pyproject.toml", "rb") as f:
        packages = tomllib.load(f)["tool"]["scikit-build"]["wheel"]["packages"]
    return {tree: root / folder for tree, folder in packages.items()}


def build_tree(tree: Path, packages: dict[str, Path]) -> None:
    """Links each mapped folder at its package path under ``tree``. A package that holds other
    mapped ones (the root) becomes a real directory of links to its own entries."""
    for name, folder in sorted(packages.items()):
        target = tree / name
        if any(other.startswith(name + "/") for other in packages):
            target.mkdir(parents=True)
            for entry in folder.iterdir():
                if entry.name != "__pycache__":
                    (target / entry.name).symlink_to(entry)
        else:
            target.symlink_to(folder, target_is_directory=True)


def repo_path(tree: Path, shown: str, root: Path = ROOT) -> str:
    """The repository path of a file mypy names by its path in ``tree``."""
    return (tree / shown).resolve().relative_to(root).as_posix()


def targets(tree: Path, packages: dict[str, Path], folders: list[Path]) -> list[str]:
    """What mypy is told to check for ``folders``: a mapped folder's package, except the root
    package, which is given its own modules (its package would take in every other one)."""
    found = []
    for name, folder in packages.items():
        chosen = [f for f in folders if f == folder or folder in f.parents]
        holds_others = any(other.startswith(name + "/") for other in packages)
        for picked in chosen:
            inside = (tree / name / picked.relative_to(folder)).relative_to(tree)
            if picked == folder and holds_others:
                found += [str(inside / p.name) for p in sorted(folder.glob("*.py"))]
            else:
                found.append(str(inside))
    return found


def mapped_within(folders: list[Path], packages: dict[str, Path]) -> list[Path]:
    """``folders`` with each one that holds mapped folders without being inside one (src,
    which holds src/compile_ahead) replaced by those."""
    found = []
    for f in folders:
        inside = any(f == p or p in f.parents for p in packages.values())
        held = [p for p in packages.values() if f in p.parents]
        found += held if held and not inside else [f]
    return found


def run_mypy(tree: Path, files: list[str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
    command += ["--cache-dir", str(ROOT / "build" / "mypy-cache"), "--no-error-summary"]
    return subprocess.run(command + files, cwd=tree, capture_output=True, text=True, check=False)


def in_repo(tree: Path, output: str, folders: list[Path]) -> list[str]:
    """mypy's messages about files in ``folders``, at their repository paths (a message about
    a file outside them, an installed package's stub included, is left out)."""
    shown = []
    for line in output.splitlines():
        match = MESSAGE.match(line)
        if match and any((tree / match["path"]).resolve().is_relative_to(f) for f in folders):
            shown.append(f"{repo_path(tree, match['path'])}:{match['rest']}")
    return shown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Type-check the package with mypy.")
    what = "folders of the repository to report, e.g. runtime (default: every mapped one)"
    parser.add_argument("folders", nargs="*", help=what)
    args = parser.parse_args(argv)
    packages = package_map()
    named = [(ROOT / f).resolve() for f in args.folders]
    folders = mapped_within(named, packages) or list(packages.values())
    unmapped = [f for f in folders if not any(f == p or p in f.parents for p in packages.values())]
    if unmapped:
        parser.error(f"not in the package: {', '.join(map(str, unmapped))}")
    with tempfile.TemporaryDirectory(prefix="typecheck-") as tmp:
        tree = Path(tmp)
        build_tree(tree, packages)
        done = run_mypy(tree, targets(tree, packages, folders))
        if done.returncode not in (0, 1):
            print(done.stdout + done.stderr, file=sys.stderr, end="")
            return 2
        messages = in_repo(tree, done.stdout, folders)
    for message in messages:
        print(message)
    errors = sum(": error: " in m for m in messages)
    names = ", ".join(str(f.relative_to(ROOT)) for f in folders)
    print(f"{errors} mypy errors in {names}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
