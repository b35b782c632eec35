"""Output directories: built aside in a staging directory, published whole by renames, and
marked with a file that lists what the tool wrote into them. Only a directory holding nothing
but what its marker lists (the user added nothing) is ever replaced by a later run."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from compile_ahead.errors import OutputWriteError, write_error
from compile_ahead.output.atomic import write_bytes_atomic
from compile_ahead.output.kind import file_kind
from compile_ahead.output.modes import PRIVATE_DIR, settle_dir
from compile_ahead.output.paths import temporary_name

OUTPUT_MARKER = ".compile-ahead-output"
_MARKER_HEADER = (
    "written by compile-ahead; a later run with the same output replaces this directory only "
    "while it holds nothing but the files listed below\n"
)
_MARKER_MAX_BYTES = 1 << 20
_TRIES = 100


def mark_output_dir(path: Path) -> None:
    """Create ``path`` (if needed) and mark it as this tool's output, listing nothing yet."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise write_error(path, err) from None
    write_bytes_atomic(path / OUTPUT_MARKER, _MARKER_HEADER.encode())


def seal_output_dir(path: Path) -> None:
    """List everything now in ``path`` in its marker: the files a later run may replace."""
    names = [name for name in _entries(path, None) if name != OUTPUT_MARKER]
    text = _MARKER_HEADER + "".join(name + "\n" for name in names)
    write_bytes_atomic(path / OUTPUT_MARKER, text.encode())


def list_in_marker(path: Path, name: str) -> None:
    """Add ``name``, a file the tool has just written into ``path``, to the marker's list when
    ``path`` is marked as this tool's output (a later run may then replace the directory)."""
    listed = _listed(path)
    if not listed or name in listed:
        return
    marker = path / OUTPUT_MARKER
    names = sorted(listed - {OUTPUT_MARKER} | {name})
    text = _MARKER_HEADER + "".join(n + "\n" for n in names)
    write_bytes_atomic(marker, text.encode())


def _entries(path: Path, listed: set[str] | None, prefix: str = "") -> Iterator[str]:
    """Relative names under ``path`` (a directory's with a trailing "/"), symbolic links not
    followed; with ``listed``, only those not in it (a listed directory is looked into)."""
    with os.scandir(path) as found:
        for entry in sorted(found, key=lambda e: e.name):
            is_dir = entry.is_dir(follow_symlinks=False)
            name = prefix + entry.name + ("/" if is_dir else "")
            if listed is None or name not in listed:
                yield name
                if listed is not None:
                    continue
            if is_dir:
                yield from _entries(Path(entry.path), listed, name)


def _listed(path: Path) -> set[str]:
    """The marker of ``path`` and what it lists (nothing without a marker that is a regular
    file; only itself when it lists nothing)."""
    marker = path / OUTPUT_MARKER
    try:
        if not stat.S_ISREG(os.lstat(marker).st_mode):
            return set()
        with open(marker, "rb") as fh:
            lines = fh.read(_MARKER_MAX_BYTES).decode(errors="replace").splitlines()
    except OSError:
        return set()
    listed = lines[1:] if lines and lines[0] + "\n" == _MARKER_HEADER else []
    return {OUTPUT_MARKER, *listed}


def foreign_entries(path: Path) -> list[str]:
    """What ``path`` holds that its marker does not list: files the tool did not write."""
    return list(_entries(path, _listed(path)))


def describe_entries(names: list[str], shown: int = 3) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def make_staging_dir(out: Path, suffix: str = "") -> Path:
    """A new private directory beside ``out`` (its name fits the file system)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(_TRIES):
        staging = out.parent / temporary_name(out, ".", suffix)
        with contextlib.suppress(FileExistsError):
            staging.mkdir(mode=PRIVATE_DIR)
            return staging
    raise FileExistsError(f"no free temporary name beside {out}")


def _replaceable(out: Path, staging: Path) -> os.stat_result | None:
    """The stat of ``out`` if it may be replaced now (absent: None); else OutputWriteError,
    ``staging`` kept and named: ``out`` changed since the checks before the work."""
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        problem = f"is now {file_kind(st.st_mode)}"
    elif foreign := foreign_entries(out):
        problem = f"now holds files this tool did not write ({describe_entries(foreign)})"
    else:
        return st
    raise OutputWriteError(f"{out}: {problem}, not replaced; the new output is kept in {staging}")


def publish_dir(staging: Path, out: Path) -> None:
    """Replace ``out`` by ``staging`` with renames only (a reader sees one or the other),
    after looking at ``out`` again: it must still be absent or hold only its marker's files.
    The marker of ``staging`` lists everything in it, then it gets its mode and owner."""
    replaced = _replaceable(out, staging)
    try:
        seal_output_dir(staging)
    except OutputWriteError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise OutputWriteError(str(err).replace(str(staging), str(out))) from None
    old = None
    try:
        settle_dir(staging, replaced)
        if replaced is not None:
            old = make_staging_dir(out, ".old")
            os.replace(out, old / out.name)
        os.replace(staging, out)
    except OSError as err:
        if old is not None and not out.exists():
            with contextlib.suppress(OSError):  # put the earlier output back
                os.replace(old / out.name, out)
        shutil.rmtree(staging, ignore_errors=True)
        raise write_error(out, err) from None
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
