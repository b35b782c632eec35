"""The per-user cache directory (synthetic checkpoints, compiled rungs, campaign environments
live under it) and the lock that makes one process write each thing there."""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from compile_ahead.errors import CompileAheadError

CACHE_DIR_ENV = "COMPILE_AHEAD_CACHE_DIR"
# Default size cap of the compile cache (compiled/): a whole-graph entry holds its compiled
# weights (a 7B model's rung is ~15 GB), so the cache is capped unless told otherwise.
COMPILED_CACHE_MAX_GB = 40.0


def cache_root() -> Path:
    """$COMPILE_AHEAD_CACHE_DIR, else $XDG_CACHE_HOME/compile-ahead, else ~/.cache/compile-ahead."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "compile-ahead"


def _open_lock(lock_path: Path) -> TextIO:
    """The lock file, never through a link and only when it is ours: a name another user
    placed (a link to a file of ours, or a file of theirs) must not make us create or lock
    what it points at."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(lock_path, flags, 0o600)
    except OSError as err:
        raise CompileAheadError(f"cannot open the lock {lock_path} ({err.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_nlink != 1:
        os.close(fd)
        raise CompileAheadError(
            f"refusing the lock {lock_path}: not a plain file of this user's with one name"
        )
    return os.fdopen(fd, "r+")


@contextmanager
def cache_lock(lock_path: Path, what: str, stream: TextIO) -> Iterator[None]:
    """An exclusive lock across processes (released when the process dies), for writing
    ``what`` into the cache once: a second process says it waits, then finds it written."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with _open_lock(lock_path) as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process writing {what} ...", file=stream, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
