"""An output never lands on an input: every command names the files and directories it reads,
and each output path is refused (one line, before any work) when it is one of them, when it
is a file inside an input directory, or when it is a directory an input lies in.

Paths are compared by what they are, not by how they are spelled: the device and inode of an
existing file, and of the resolved directories above a path, so another name, ``./``, a
symbolic link on the way or a hard link gives no way around the check.

An input that is an SQLite database (a campaign store) brings the files SQLite keeps beside it
(``-wal``, ``-shm``, ``-journal``): SQLite makes and deletes them as it opens and closes the
database, so their names are inputs whether a file is there now or not (an output written at
one while the store is closed would be deleted, or read as the store's log, when it next
opens).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from compile_ahead.errors import CompileAheadError

Identity = tuple[int, int]  # (st_dev, st_ino)
Entry = tuple[Identity | None, str]  # a name: its directory's identity and the name in it
# Files looked at for a hard link to an output, per input directory (a bound on the walk).
HARD_LINK_SCAN_MAX = 100_000
SQLITE_HEADER = b"SQLite format 3\x00"  # how every SQLite database file starts
# What SQLite names the files it keeps beside a database: its name and one of these.
SQLITE_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")


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


def _entry(path: Path) -> Entry:
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


def sqlite_side_files(database: Path) -> list[Path]:
    """The files SQLite keeps beside ``database`` (there or not)."""
    return [database.with_name(database.name + suffix) for suffix in SQLITE_SIDE_SUFFIXES]


def is_sqlite_file(path: Path) -> bool:
    """Whether ``path`` is a regular file that starts as an SQLite database does."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False  # never opened: a FIFO would block
        with path.open("rb") as fh:
            return fh.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


class Inputs:
    """What a command reads: files, and directories it reads files in; and the names of the
    files SQLite keeps beside a database among them, there or not."""

    def __init__(self, paths: Iterable[Path | str | None]) -> None:
        self.items: list[tuple[Path, Identity, bool]] = []
        self.side_names: dict[Entry, tuple[Path, Path]] = {}  # name -> (side file, database)
        for path in paths:
            if path is not None:
                self._add(Path(path))

    def _add(self, path: Path, database: bool = True) -> None:
        try:
            st = os.stat(path)
        except OSError:
            return  # not there: nothing to lose (the command says so itself)
        self.items.append((path, (st.st_dev, st.st_ino), stat.S_ISDIR(st.st_mode)))
        if database and is_sqlite_file(path):
            for side in sqlite_side_files(path):
                self.side_names[_entry(side)] = (side, path)
                self._add(side, database=False)  # one there now: an input by identity too

    def named(self, target: Identity) -> Path | None:
        return next((path for path, ident, _ in self.items if ident == target), None)

    def side_file_at(self, path: Path) -> tuple[Path, Path, bool] | None:
        """(side file, its database, whether ``path`` is inside it) when ``path``, or a
        directory above it, has the name of a file SQLite keeps beside an input database."""
        for where in (path, *Path(os.path.abspath(path)).parents):
            found = self.side_names.get(_entry(where))
            if found is not None:
                return (*found, where != path)
        return None

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


def _check_side_names(flag: str, out: Path, inputs: Inputs) -> None:
    """Refuse an output at (or inside) the name of an input database's side file."""
    found = inputs.side_file_at(out)
    if found is not None:
        side, database, inside = found
        where = "is inside" if inside else "is"
        why = f"{where} {side}, a file SQLite makes and deletes beside {database}"
        raise _refuse(flag, out, f"{why}, which this command reads")


def _check_one(flag: str, out: Path, inputs: Inputs, own: set[Identity]) -> None:
    _check_side_names(flag, out, inputs)
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
