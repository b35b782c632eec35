"""Output paths of a command: checked before any work, never replaced by a failed run.

An output file is a regular file the tool creates, or replaces whole when it is one; anything
else at the path (a device such as /dev/null, a FIFO, a socket, a directory, a symbolic link,
/dev/stdout included) is refused. An output directory is created, or replaced whole when it
holds nothing but what an earlier run of the tool wrote there. A failed or interrupted run
writes beside the requested path (``destination``), never over it. No output is one of the
command's inputs, or a file in a directory it reads (``check_not_inputs``, input_files.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.input_files import check_not_inputs
from compile_ahead.output_dirs import (
    OUTPUT_MARKER,
    describe_entries,
    foreign_entries,
    mark_output_dir,
)
from compile_ahead.output_paths import (
    DIRECTORY,
    REGULAR_FILE,
    failed_sibling,
    name_max,
    node_kind,
    too_long_part,
)

__all__ = [
    "OUTPUT_MARKER",
    "check_distinct",
    "check_new_dir",
    "check_not_inputs",
    "check_output_file",
    "check_replaceable_dir",
    "destination",
    "failed_sibling",
    "invocation",
    "mark_output_dir",
]


def destination(path: Path, completed: bool, *, is_dir: bool = False) -> Path:
    """Where an output goes: ``path`` for a run that completed; for one that failed or was
    interrupted its failed sibling (``run.failed.json``), so a good earlier output survives."""
    return path if completed else failed_sibling(path, is_dir=is_dir)


def _check_name(path: Path, flag: str) -> None:
    part = too_long_part(path)
    if part is not None:
        raise CompileAheadError(
            f"{flag} {path}: the name {part[:40]}... is {len(os.fsencode(part))} bytes, longer "
            f"than its file system allows ({name_max(path.parent)})"
        )


def check_output_file(path: Path, flag: str) -> None:
    """Fail now, before any work, unless ``path`` and the sibling a failed run would write
    are absent or regular files, in a directory that can be written."""
    _check_name(path, flag)
    for where in (path, failed_sibling(path)):
        kind = node_kind(where)
        if kind in (None, REGULAR_FILE):
            continue
        which = "" if where == path else f"a failed or interrupted run writes {where}, which "
        raise CompileAheadError(
            f"{flag} {path}: {which}is {kind}; outputs are written only as regular files, "
            "created or replaced whole: name a file"
        )
    _check_parent_writable(path, flag)
    if path.exists() and not os.access(path, os.W_OK):
        raise CompileAheadError(f"{flag} {path}: is not writable")


def check_distinct(outputs: dict[str, Path | None]) -> None:
    """Two flags naming one file (or one's failed sibling) would overwrite each other."""
    seen: dict[Path, str] = {}
    for flag, path in outputs.items():
        if path is None:
            continue
        for key in {path.resolve(), failed_sibling(path).resolve()}:
            if key in seen:
                raise CompileAheadError(f"{seen[key]} and {flag} name the same file {key}")
            seen[key] = flag


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


def _check_dir_kind(path: Path, flag: str) -> bool:
    """Whether ``path`` is a directory (False: absent); anything else is refused."""
    kind = node_kind(path)
    if kind not in (None, DIRECTORY):
        raise CompileAheadError(f"{flag} {path}: is not a directory but {kind}; name a new one")
    return kind == DIRECTORY


def check_replaceable_dir(path: Path, flag: str) -> None:
    """Fail now, before any work, unless ``path`` and the sibling a failed run would write
    (``path.failed``) are each absent, empty or an earlier output of this tool that holds
    nothing but what the tool wrote: the user's own files are never replaced."""
    _check_name(path, flag)
    _refuse_working_directory(path, flag)
    for where in (path, failed_sibling(path, is_dir=True)):
        if not _check_dir_kind(where, flag):
            continue
        foreign = foreign_entries(where)
        if foreign:
            which = "" if where == path else f"a failed run would replace {where}, which "
            raise CompileAheadError(
                f"{flag} {path}: {which}holds files that are not an earlier output of this "
                f"tool ({describe_entries(foreign)}); it is never replaced: name a new directory"
            )
    _check_parent_writable(path, flag)


def check_new_dir(path: Path, flag: str) -> None:
    """Fail now, before any work, unless ``path`` is absent or an empty directory: one
    experiment per directory, never mixed with other files."""
    _check_name(path, flag)
    _refuse_working_directory(path, flag)
    if _check_dir_kind(path, flag) and any(path.iterdir()):
        raise CompileAheadError(
            f"{flag} {path}: exists and is not empty; each run needs a new directory"
        )
    _check_parent_writable(path, flag)


def invocation(prog: str, argv: Sequence[str]) -> dict[str, object]:
    """How a command was started (its arguments as given, and the working directory they are
    relative to): kept in its outputs, so a report can show the command that reruns it."""
    return {"argv": [prog, *argv], "cwd": os.getcwd()}
