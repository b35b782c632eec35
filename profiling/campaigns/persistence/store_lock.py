"""One coordinator per campaign store: an exclusive flock on the store file itself.

The lock is the file's, not a name's: every name of the store (another path to it, ``./``, a
hard link) opens the same inode and finds it taken. No lock file is made beside the store, so a
store that is refused (a folder, a FIFO, a device, a file that is no store) leaves nothing
behind, and no name another user planted there is ever opened or written. Who holds the lock is
written in the store (meta key ``coordinator``) by the coordinator that holds it. The kernel
drops the flock when its process dies, however it dies, so a SIGKILLed coordinator leaves no
stale lock. SQLite's own locks are POSIX record locks, which flock does not touch (on a local
disk; flock on a network file system is not reliable).

A store is used by its own name, never through a symbolic link (``own_name``): SQLite would
follow the link while STORE.blocks and the lock's checks went by the link's name, and another
user's link in a shared directory could point a campaign at any file. A store is used only
when it is this user's own regular file that no other user can write: one another user owns
or can change is refused, in one line, before it is locked or read. A store with more than
one name (hard links) is refused too, once no coordinator holds it: SQLite keeps its
write-ahead log beside the name a database is opened by, so two names of one store would each
miss what the other's log holds.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import stat
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.kind import file_kind
from compile_ahead.output.paths import node_kind

HOLDER_KEY = "coordinator"
# O_NONBLOCK and O_NOCTTY: never wait on, or take, a FIFO or terminal put where the store was.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _link_refused(path: Path) -> CompileAheadError:
    return CompileAheadError(
        f"{path}: is {node_kind(path)}; a campaign store is used by its own name, never "
        "through a link: name the store file itself"
    )


def own_name(path: Path) -> os.stat_result:
    """``path``'s own status, a symbolic link not followed; one line unless it is a regular
    file (a link to one included: refused)."""
    try:
        st = os.lstat(path)
    except OSError:
        raise CompileAheadError(f"{path}: no campaign store") from None
    if stat.S_ISLNK(st.st_mode):
        raise _link_refused(path)
    if not stat.S_ISREG(st.st_mode):
        raise CompileAheadError(f"{path}: no campaign store")
    return st


def refuse_link(path: Path) -> None:
    """One line if ``path`` is a symbolic link (a store there or not: nothing is made
    through it)."""
    if os.path.islink(path):
        raise _link_refused(path)


def _open_regular(path: Path) -> int:
    """``path``'s file opened for its lock, or one line if it is not a regular file of that
    name."""
    own_name(path)
    try:
        fd = os.open(path, _OPEN_FLAGS | os.O_NOFOLLOW)
    except OSError as err:
        if err.errno == errno.ELOOP:  # made a link since it was looked at
            raise _link_refused(path) from None
        raise CompileAheadError(f"{path}: no campaign store") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # replaced between the two looks
        os.close(fd)
        raise CompileAheadError(f"{path}: no campaign store ({file_kind(st.st_mode)})")
    return fd


def _owner_problem(st: os.stat_result) -> str | None:
    if st.st_uid != os.geteuid():
        return f"is owned by another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "can be written by other users (chmod go-w)"
    return None


def holder_of(path: Path) -> str:
    """Who the store says holds its lock (read only; "another process" if it cannot say)."""
    with contextlib.suppress(sqlite3.Error):
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (HOLDER_KEY,)).fetchone()
        finally:
            conn.close()
        if row is not None and row[0]:
            return str(row[0])
    return "another process"


class CoordinatorLock:
    """The flock on a store's file; ``release`` only after the store's connection is closed
    (closing this descriptor drops every POSIX lock this process holds on the file)."""

    def __init__(self, store: Path):
        self.store = store
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Lock the existing store at ``store``; one line if another coordinator holds it or
        the file cannot be a store of this user's."""
        fd = _open_regular(self.store)
        problem = _owner_problem(os.fstat(fd))
        if problem is not None:
            os.close(fd)
            raise CompileAheadError(f"{self.store}: {problem}; a store is used only by its owner")
        self.hold(fd, self.store)
        links = os.fstat(fd).st_nlink
        if links > 1:  # SQLite's journal (-wal) is kept beside the name a store is opened by
            self.release()
            raise CompileAheadError(
                f"{self.store}: the store has {links} names (hard links), and SQLite keeps its "
                "journal beside each name: use it by one name only (remove the other links)"
            )

    def hold(self, fd: int, shown: Path) -> None:
        """Take the lock on the open file ``fd`` (this object owns ``fd`` from now on)."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CompileAheadError(
                f"{shown}: another coordinator runs this campaign ({holder_of(shown)}); one "
                "coordinator per store"
            ) from None
        self._fd = fd

    def check_same(self, path: Path) -> None:
        """The store opened at ``path`` is still the file that is locked."""
        assert self._fd is not None
        locked, named = os.fstat(self._fd), os.stat(path)
        if (locked.st_dev, locked.st_ino) != (named.st_dev, named.st_ino):
            raise CompileAheadError(f"{path}: was replaced while it was opened; run again")

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def coordinator_running(store: Path) -> bool:
    """Whether a coordinator holds the store's lock now (nothing is written to find out).
    Call it while this process has no connection to the store open (see CoordinatorLock)."""
    try:
        fd = _open_regular(store)
    except CompileAheadError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops the shared lock taken, if it was
    return False
