"""Output paths of a command: checked before any work, never replaced by a failed run."""

from __future__ import annotations

import os
from pathlib import Path

from compile_ahead.errors import CompileAheadError


def check_output_file(path: Path, flag: str) -> None:
    """Fail now, before any work, if ``path`` cannot be written as a file."""
    if path.is_dir():
        raise CompileAheadError(f"{flag} {path}: is a directory")
    parent = path.parent
    probe = parent
    while not probe.exists():  # the nearest existing ancestor decides
        probe = probe.parent
    if not probe.is_dir():
        raise CompileAheadError(f"{flag} {path}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise CompileAheadError(f"{flag} {path}: {probe} is not writable")
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
