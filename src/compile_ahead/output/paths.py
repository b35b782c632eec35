"""Names and kinds of output paths: what is at a path (without following a symlink), the
longest name its file system takes, and the names the tools derive from an output's name (a
failed run's sibling, temporary files) cut to fit that limit whatever the output's length."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from compile_ahead.output.kind import file_kind

# The usual NAME_MAX, when the file system cannot be asked.
DEFAULT_NAME_MAX = 255
REGULAR_FILE = "a regular file"
DIRECTORY = "a directory"


def node_kind(path: Path) -> str | None:
    """What ``path`` itself is (a symbolic link is not followed, and is named with its
    target); None when nothing is there."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(mode):
        return f"a symbolic link (to {os.readlink(path)})"
    return file_kind(mode)


def name_max(directory: Path) -> int:
    """The longest file name (in bytes) the file system holding ``directory`` takes (its
    nearest existing ancestor when it does not exist yet)."""
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return os.pathconf(probe, "PC_NAME_MAX")
    except (OSError, ValueError):
        return DEFAULT_NAME_MAX


def name_bytes(name: str) -> int:
    return len(os.fsencode(name))


def too_long_part(path: Path) -> str | None:
    """A component of ``path`` longer than its file system takes, or None."""
    limit = name_max(path.parent)
    return next((part for part in path.parts if name_bytes(part) > limit), None)


def cut_to(name: str, limit: int) -> str:
    """``name`` shortened (whole characters) to at most ``limit`` bytes."""
    while name_bytes(name) > limit:
        name = name[:-1]
    return name


def failed_sibling(path: Path, *, is_dir: bool = False) -> Path:
    """Where a failed or interrupted run writes instead of ``path``, so a good earlier output
    survives: ``run.json`` -> ``run.failed.json``, a directory ``prof`` -> ``prof.failed``.
    The stem is cut when the name would pass the file system's limit."""
    stem, tail = (path.name, ".failed") if is_dir else (path.stem, f".failed{path.suffix}")
    limit = name_max(path.parent)
    if name_bytes(tail) >= limit:  # a suffix as long as a name: keep it in the stem
        stem, tail = path.name, ".failed"
    return path.with_name(cut_to(stem, limit - name_bytes(tail)) + tail)


def temporary_name(target: Path, prefix: str = ".", suffix: str = "") -> str:
    """A fresh name beside ``target`` for a file or directory written before it is renamed
    to ``target``: ``{prefix}{target's name}.{random}{suffix}``, the target's name cut so the
    whole fits the file system."""
    tail = f".{secrets.token_hex(4)}{suffix}"
    room = name_max(target.parent) - name_bytes(prefix) - name_bytes(tail)
    return prefix + cut_to(target.name, max(room, 1)) + tail
