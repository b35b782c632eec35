"""Modes and owners of published outputs. Outputs are written privately (0600, a directory
0700) and get their final mode when published: a new one what the umask gives, one that
replaces an earlier output never more than the earlier one had (the narrower of the two), with
the earlier one's owner and group kept where the system allows it (root replacing another
user's file). When the group cannot be kept, the group's permissions are dropped: they were
granted to that group, not to the writer's."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
_GROUP_BITS = 0o070


def current_umask() -> int:
    """The process's umask, read without changing it (another thread may be creating files)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o077)  # no /proc: set a narrow one for the instant it takes
    os.umask(mask)
    return mask


def new_mode(is_dir: bool) -> int:
    """What a file (0666) or directory (0777) created now gets under the umask."""
    return (0o777 if is_dir else 0o666) & ~current_umask()


def published_mode(is_dir: bool, replaced: os.stat_result | None) -> int:
    """The umask's mode, never wider than what ``replaced`` (if any) had."""
    mode = new_mode(is_dir)
    if replaced is not None:
        mode &= stat.S_IMODE(replaced.st_mode) & 0o777
    return mode


def _keep_owner(fd: int, replaced: os.stat_result) -> tuple[bool, bool]:
    """Give ``fd`` the owner and group of ``replaced`` where allowed: (owner kept, group kept)."""
    own = os.fstat(fd)
    if (own.st_uid, own.st_gid) == (replaced.st_uid, replaced.st_gid):
        return True, True
    with contextlib.suppress(PermissionError):
        os.fchown(fd, replaced.st_uid, replaced.st_gid)
        return True, True
    with contextlib.suppress(PermissionError):
        os.fchown(fd, -1, replaced.st_gid)
        return False, True
    return False, own.st_gid == replaced.st_gid


def settle(fd: int, is_dir: bool, replaced: os.stat_result | None) -> tuple[int, int] | None:
    """Give the open file or directory ``fd`` its published mode (and, when it replaces
    ``replaced``, that one's owner and group where allowed). Returns the (uid, gid) it now has
    when they were changed, for the entries of a directory to follow; else None."""
    mode = published_mode(is_dir, replaced)
    changed = None
    if replaced is not None:
        owner_kept, group_kept = _keep_owner(fd, replaced)
        if not group_kept:
            mode &= ~_GROUP_BITS
        if owner_kept or group_kept:
            st = os.fstat(fd)
            changed = (st.st_uid, st.st_gid)
    os.fchmod(fd, mode)
    return changed


def settle_dir(path: Path, replaced: os.stat_result | None) -> None:
    """``settle`` for a directory about to be published; its entries (written by this process)
    follow its owner and group when those were kept from the replaced directory."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        owner = settle(fd, True, replaced)
    finally:
        os.close(fd)
    if owner is None:
        return
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), *owner, follow_symlinks=False)
