"""What kind of file a mode is, in words for a one-line message ("not a file (a FIFO)")."""

from __future__ import annotations

import stat

_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def file_kind(mode: int) -> str:
    """``st_mode`` as words: "a regular file", "a directory", "a FIFO", ..."""
    return next((name for test, name in _KINDS if test(mode)), "a special file")
