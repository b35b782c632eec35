"""The per-user cache directory (synthetic checkpoints, compiled rungs, campaign environments
live under it) and the lock that makes one process write each thing there."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

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


@contextmanager
def cache_lock(lock_path: Path, what: str, stream: TextIO) -> Iterator[None]:
    """An exclusive lock across processes (released when the process dies), for writing
    ``what`` into the cache once: a second process says it waits, then finds it written."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process writing {what} ...", file=stream, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
