"""Output paths of a command: checked before any work, never replaced by a failed run."""

from __future__ import annotations

import os
from pathlib import Path

from compile_ahead.errors import CompileAheadError, write_error

# Written into every output directory the tools create: only a directory holding it is ever
# replaced by a later run (anything else may be the user's own files).
OUTPUT_MARKER = ".compile-ahead-output"
_MARKER_TEXT = "written by compile-ahead; a later run with the same output may replace it\n"


def check_output_file(path: Path, flag: str) -> None:
    """Fail now, before any work, if ``path`` cannot be written as a file."""
    if path.is_dir():
        raise CompileAheadError(f"{flag} {path}: is a directory")
    _check_parent_writable(path, flag)
    if path.exists() and not os.access(path, os.W_OK):
        raise CompileAheadError(f"{flag} {path}: is not writable")


def check_distinct(outputs: dict[str, Path | None]) -> None:
    """Two flags naming one file would silently overwrite each other."""
    seen: dict[Path, str] = {}
    for flag, path in outputs.items():
        if path is None:
            continue
        key = path.resolve()
        if key in seen:
            raise CompileAheadError(f"{seen[key]} and {flag} name the same file {path}")
        seen[key] = flag


def failed_sibling(path: Path) -> Path:
    """Where a failed run writes instead of ``path``, so a good earlier output survives:
    ``run.json`` -> ``run.failed.json``."""
    return path.with_name(f"{path.stem}.failed{path.suffix}")


def _refuse_working_directory(path: Path, flag: str) -> None:
    here = Path.cwd().resolve()
    target = path.resolve()
    if target == here or target in here.parents:
        raise CompileAheadError(
            f"{flag} {path}: is the working directory or one of its parents, never replaced; "
            "name a new directory"
        )


def _check_parent_writable(path: Path, flag: str) -> None:
    probe = path.parent
    while not probe.exists():  # the nearest existing ancestor decides
        probe = probe.parent
    if not probe.is_dir():
        raise CompileAheadError(f"{flag} {path}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise CompileAheadError(f"{flag} {path}: {probe} is not writable")


def is_own_output(path: Path) -> bool:
    """A directory this tool wrote (it holds the marker), so a later run may replace it."""
    return (path / OUTPUT_MARKER).is_file()


def check_replaceable_dir(path: Path, flag: str) -> None:
    """Fail now, before any work, unless ``path`` is absent, an empty directory or an earlier
    output of this tool: the user's own directories are never replaced."""
    _refuse_working_directory(path, flag)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise CompileAheadError(f"{flag} {path}: exists and is not a directory")
        if any(path.iterdir()) and not is_own_output(path):
            raise CompileAheadError(
                f"{flag} {path}: holds files that are not an earlier output of this tool "
                f"(no {OUTPUT_MARKER}); it is never replaced: name a new directory"
            )
    _check_parent_writable(path, flag)


def check_new_dir(path: Path, flag: str) -> None:
    """Fail now, before any work, unless ``path`` is absent or an empty directory: one
    experiment per directory, never mixed with other files."""
    _refuse_working_directory(path, flag)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise CompileAheadError(f"{flag} {path}: exists and is not a directory")
        if any(path.iterdir()):
            raise CompileAheadError(
                f"{flag} {path}: exists and is not empty; each run needs a new directory"
            )
    _check_parent_writable(path, flag)


def mark_output_dir(path: Path) -> None:
    """Create ``path`` (if needed) and write the marker that makes it this tool's output."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / OUTPUT_MARKER).write_text(_MARKER_TEXT)
    except OSError as err:
        raise write_error(path / OUTPUT_MARKER, err) from None
