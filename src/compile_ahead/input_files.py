"""An output never lands on an input: every command names the files and directories it reads,
and each output path is refused (one line, before any work) when it is one of them, when it
is a file inside an input directory, or when it is a directory an input lies in.

Paths are compared by what they are, not by how they are spelled: the device and inode of an
existing file, and of the resolved directories above a path, so another name, ``./``, a
symbolic link on the way or a hard link gives no way around the check.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from compile_ahead.errors import CompileAheadError

Identity = tuple[int, int]  # (st_dev, st_ino)
# Files looked at for a hard link to an output, per input directory (a bound on the walk).
HARD_LINK_SCAN_MAX = 100_000


def identity(path: Path, *, follow: bool = True) -> Identity | None:
    """The device and inode of what ``path`` names (None: nothing there)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _resolved_dirs(path: Path) -> Iterator[tuple[Path, Identity]]:
    """The existing directories ``path`` is inside, nearest first (links resolved)."""
    probe = Path(os.path.abspath(path)).parent.resolve()
    for where in (probe, *probe.parents):
        found = identity(where)
        if found is not None:
            yield where, found


def _entry(path: Path) -> tuple[Identity | None, str]:
    """A name as its directory (by identity) and the name in it: one entry however spelled."""
    return identity(Path(os.path.abspath(path)).parent), path.name


def _hard_links(directory: Path, out: Path, target: Identity) -> Path | None:
    """A file under ``directory``, other than ``out`` itself, that is ``target`` under
    another name (symbolic links to files count: a command reading the directory follows
    them)."""
    seen, itself = 0, _entry(out)
    for root, dirs, files in os.walk(directory):
        for name in files:
            seen += 1
            if seen > HARD_LINK_SCAN_MAX:
                return None
            path = Path(root, name)
            if identity(path) == target and _entry(path) != itself:
                return path
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    return None


class Inputs:
    """What a command reads: files, and directories it reads files in."""

    def __init__(self, paths: Iterable[Path | str | None]) -> None:
        self.items: list[tuple[Path, Identity, bool]] = []
        for path in paths:
            if path is None:
                continue
            path = Path(path)
            try:
                st = os.stat(path)
            except OSError:
                continue  # not there: nothing to lose (the command says so itself)
            self.items.append((path, (st.st_dev, st.st_ino), stat.S_ISDIR(st.st_mode)))

    def named(self, target: Identity) -> Path | None:
        return next((path for path, ident, _ in self.items if ident == target), None)

    def directories(self) -> Iterator[tuple[Path, Identity]]:
        return ((path, ident) for path, ident, is_dir in self.items if is_dir)


def _refuse(flag: str, out: Path, why: str) -> CompileAheadError:
    return CompileAheadError(
        f"{flag} {out}: {why}; an output never replaces an input: name another"
    )


def _check_file(flag: str, out: Path, target: Identity, inputs: Inputs, own: bool) -> None:
    same = inputs.named(target)
    if same is not None:
        raise _refuse(flag, out, f"is {same}, which this command reads")
    if not own:
        above = {ident for _, ident in _resolved_dirs(out)}
        for directory, ident in inputs.directories():
            if ident in above:
                raise _refuse(flag, out, f"is inside {directory}, which this command reads")
    if os.stat(out).st_nlink > 1:
        for directory, _ in inputs.directories():
            link = _hard_links(directory, out, target)
            if link is not None:
                raise _refuse(flag, out, f"is {link} (a hard link), which this command reads")


def _check_one(flag: str, out: Path, inputs: Inputs, own: set[Identity]) -> None:
    target = identity(out)
    if target is None:
        return  # a new file or directory replaces nothing
    if not os.path.isdir(out):
        _check_file(flag, out, target, inputs, target in own)
        return
    for path, ident, _ in inputs.items:  # a directory is replaced whole: it holds no input
        if ident == target or target in {i for _, i in _resolved_dirs(path)}:
            raise _refuse(flag, out, f"holds {path}, which this command reads")


def check_not_inputs(
    outputs: Mapping[str, Path | None],
    inputs: Iterable[Path | str | None],
    own: Iterable[Path] = (),
) -> None:
    """Refuse (CompileAheadError, one line) an output (flag -> path) that is one of
    ``inputs``, a file inside an input directory, or a directory an input is in. ``own``: the
    command's own outputs that may sit in an input directory (e.g. the compare page in the
    results directory it shows), allowed there unless they are an input under another name."""
    known = Inputs(inputs)
    mine = {i for i in (identity(p) for p in own) if i is not None}
    for flag, out in outputs.items():
        if out is not None:
            _check_one(flag, Path(out), known, mine)
