"""The compile cache's directories and files, opened so that no other user can plant, swap or
redirect one, in a shared cache root (``--cache-dir /tmp/shared``, mode 1777) too.

- The root (the directory the user names) is used when it is owned by this user or by root and
  either no one else can write it or it is sticky (others then cannot rename or delete what is
  ours). A root that others can write holds one directory per user, ``uid-<euid>``, which this
  user creates and must own: entries never sit beside other users' files, and users sharing a
  root never collide.
- Below that base every directory and entry is opened relative to its parent's descriptor with
  O_NOFOLLOW (a symbolic link is never followed) and checked on the opened descriptor (fstat,
  so nothing can be swapped between the check and the use): this user's own directory or
  regular file, writable by no one else.
- Directories are created 0700 and entries 0600, whatever the umask: an entry holds a model's
  compiled weights, and since other users' entries are refused, a wider mode would share
  nothing and could leak a private model. This user's own directories and entries found with
  wider modes (an earlier version's, or made under a wider umask) are narrowed to these when
  opened, except an entry others could write, which is refused (it may have been rewritten).
  The root keeps the mode the user gave it, unless it is the cache's own default directory.

Anything else raises ``UntrustedPath`` (what and why, one clause); the cache then warns once and
compiles without it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from compile_ahead.output.kind import file_kind

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_OTHERS_ANY = stat.S_IRWXG | stat.S_IRWXO
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO where an entry should be opens at once (and is refused) instead of waiting.
_ENTRY_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UntrustedPath(Exception):
    """A cache directory or entry that another user could have planted or can change."""

    def __init__(self, path: Path, why: str):
        super().__init__(f"{path} {why}")
        self.path, self.why = path, why


class UntrustedEntry(UntrustedPath):
    """An entry (not a directory) that is not this user's own regular file."""


def user_dir_name() -> str:
    """This user's own directory in a root that other users can write."""
    return f"uid-{os.geteuid()}"


def _own_problem(st: os.stat_result, want_dir: bool) -> str | None:
    """Why an opened directory or entry is not this user's own, or None."""
    if not (stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)):
        return f"is {file_kind(st.st_mode)}, not {'a directory' if want_dir else 'a regular file'}"
    if st.st_uid != os.geteuid():
        return f"is owned by another user (uid {st.st_uid})"
    return None


def _made_private(fd: int, st: os.stat_result, mode: int) -> str | None:
    """Narrow this user's own directory or entry open on ``fd`` to ``mode`` when it is wider;
    why it cannot be used, or None. An entry others could write stays refused."""
    if not st.st_mode & _OTHERS_ANY:
        return None
    if stat.S_ISREG(st.st_mode) and st.st_mode & _OTHERS_WRITE:
        return "can be written by other users"
    with contextlib.suppress(OSError):  # a file system without modes: checked below
        os.fchmod(fd, mode)
    if os.fstat(fd).st_mode & _OTHERS_WRITE:
        return "can be written by other users"
    return None


def root_problem(st: os.stat_result) -> str | None:
    """Why the root cannot hold this user's entries, or None (see the module docstring): a
    directory whose entries only this user or root can rename or replace."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"is owned by another user (uid {st.st_uid})"
    if st.st_mode & _OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
        return "can be written by other users and has no sticky bit (chmod +t, or go-w)"
    return None


def _checked(fd: int, shown: Path, want_dir: bool, strict: bool = False) -> int:
    """``fd`` if it is this user's own directory (or regular file); closed and refused if not.
    ``strict``: one that others can write is refused too, not narrowed (what they may have
    put in it is unknown)."""
    try:
        st = os.fstat(fd)
        problem = _own_problem(st, want_dir)
        if problem is None and strict and st.st_mode & _OTHERS_WRITE:
            problem = "can be written by other users"
        problem = problem or _made_private(
            fd, st, PRIVATE_DIR_MODE if want_dir else PRIVATE_FILE_MODE
        )
    except OSError:
        os.close(fd)
        raise
    if problem is not None:
        os.close(fd)
        raise (UntrustedPath if want_dir else UntrustedEntry)(shown, problem)
    return fd


def open_private_dir(
    parent_fd: int, name: str, shown: Path, create: bool, strict: bool = False
) -> int | None:
    """This user's own directory ``name`` in ``parent_fd`` (created 0700 with ``create``),
    never through a symbolic link; None when it is absent and not created. ``strict``: one
    that others can write is refused (``_checked``)."""
    for attempt in range(2):
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
            return _checked(fd, shown, want_dir=True, strict=strict)
        except FileNotFoundError:
            if not create or attempt:
                return None
            with contextlib.suppress(FileExistsError):  # made meanwhile: checked when opened
                os.mkdir(name, PRIVATE_DIR_MODE, dir_fd=parent_fd)
        except OSError as err:
            if err.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            mode = os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode
            raise UntrustedPath(shown, f"is {file_kind(mode)}, not a directory") from None
    return None


def open_private_subdirs(
    fd: int | None, shown: Path, names: Sequence[str], create: bool, strict: bool = False
) -> int | None:
    """From the open directory ``fd`` (at ``shown``; this call owns and closes it) down through
    ``names``, each step this user's own directory (``open_private_dir``): the last one's
    descriptor, or None when ``fd`` is None or a step is absent and not created."""
    for name in names:
        if fd is None:
            break
        shown = shown / name
        parent, fd = fd, None
        try:
            fd = open_private_dir(parent, name, shown, create, strict)
        finally:
            os.close(parent)
    return fd


def make_private_dirs(path: Path) -> None:
    """``mkdir -p path`` with every directory it creates 0700."""
    try:
        os.mkdir(path, PRIVATE_DIR_MODE)
    except FileExistsError:
        pass
    except FileNotFoundError:
        if path.parent == path:
            raise
        make_private_dirs(path.parent)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, PRIVATE_DIR_MODE)


@dataclass(frozen=True)
class Base:
    """Where entries live (the root, or this user's directory in a shared root), and its open
    descriptor; None while it does not exist."""

    path: Path
    fd: int | None


def open_base(root: Path, create: bool, own_root: bool = False) -> Base:
    """The base of the cache rooted at ``root`` (created, privately, with ``create``; narrowed
    to 0700 if it is this user's and ``own_root``: the cache's default directory). UntrustedPath
    when the root or this user's directory in it cannot be trusted, OSError (NotADirectoryError
    for a root that is a file) when it cannot be opened."""
    if create:
        make_private_dirs(root)
    try:
        link = os.lstat(root)
    except (FileNotFoundError, NotADirectoryError):
        if create:
            raise
        return Base(root, None)
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (os.geteuid(), 0):
        raise UntrustedPath(root, f"is a symbolic link owned by another user (uid {link.st_uid})")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if own_root and st.st_uid == os.geteuid() and st.st_mode & _OTHERS_ANY:
            _made_private(fd, st, PRIVATE_DIR_MODE)
            st = os.fstat(fd)
        if (problem := root_problem(st)) is not None:
            raise UntrustedPath(root, problem)
        if not st.st_mode & _OTHERS_WRITE:
            base, fd = Base(root, fd), -1  # kept open: owned by the Base now
            return base
        own = root / user_dir_name()
        return Base(own, open_private_dir(fd, own.name, own, create))
    finally:
        if fd >= 0:
            os.close(fd)


class PrivateFile:
    """A new file (0600, created exclusively, never through a link) written under a temporary
    name beside ``name`` in the directory ``dir_fd`` (which it owns and closes) and renamed to
    ``name`` by ``commit``; removed on exit unless committed. Use it in a ``with``."""

    def __init__(self, dir_fd: int, name: str):
        self._dir_fd, self._name = dir_fd, name
        self._tmp = f".{name}.{secrets.token_hex(4)}"
        try:
            fd = os.open(self._tmp, _NEW_FILE_FLAGS, PRIVATE_FILE_MODE, dir_fd=dir_fd)
        except BaseException:
            os.close(dir_fd)
            raise
        self.file: BinaryIO = os.fdopen(fd, "wb")
        self._committed = False

    def commit(self) -> None:
        self.file.close()
        os.replace(self._tmp, self._name, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
        self._committed = True

    def discard(self) -> None:
        """Remove the temporary name now, e.g. from another thread while this one writes
        (entry_writes.py: a write given up); a later commit then fails."""
        if not self._committed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._tmp, dir_fd=self._dir_fd)

    def __enter__(self) -> PrivateFile:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if not self._committed:
                self.file.close()
                with contextlib.suppress(OSError):
                    os.unlink(self._tmp, dir_fd=self._dir_fd)
        finally:
            os.close(self._dir_fd)


class CacheTree:
    """The paths of the cache rooted at ``root``, opened as the module docstring says. The root
    is opened again for every operation (a cache directory renamed or replaced meanwhile is not
    written through a stale descriptor); paths are full paths under ``base_path()``."""

    def __init__(self, root: Path, own_root: bool = False):
        self.root = root
        self.own_root = own_root  # the cache's default directory: narrowed (open_base)

    def base_path(self) -> Path:
        """Where this user's entries live; UntrustedPath or OSError as ``open_base`` says."""
        base = open_base(self.root, False, self.own_root)
        if base.fd is not None:
            os.close(base.fd)
        return base.path

    @contextlib.contextmanager
    def directory(self, path: Path, create: bool = False) -> Iterator[int | None]:
        """A descriptor of the directory ``path`` (the base or below it, every step this
        user's own), or None when it does not exist (and is not created)."""
        base = open_base(self.root, create, self.own_root)
        if not path.is_relative_to(base.path):  # named before the root changed
            if base.fd is not None:
                os.close(base.fd)
            raise UntrustedPath(path, f"is not inside the cache's own directory {base.path}")
        fd = open_private_subdirs(base.fd, base.path, path.relative_to(base.path).parts, create)
        try:
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    def open_entry(self, path: Path) -> int | None:
        """The entry opened for reading, or None when it is absent; UntrustedEntry when it is
        not this user's own regular file, UntrustedPath when its directory is not its own."""
        with self.directory(path.parent) as dir_fd:
            if dir_fd is None:
                return None
            try:
                fd = os.open(path.name, _ENTRY_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                return None
            except OSError as err:
                if err.errno == errno.ELOOP:
                    raise UntrustedEntry(path, "is a symbolic link") from None
                raise
            return _checked(fd, path, want_dir=False)

    def new_file(self, path: Path) -> PrivateFile:
        """A PrivateFile that becomes ``path`` when committed (its directories created)."""
        with self.directory(path.parent, create=True) as dir_fd:
            assert dir_fd is not None  # created
            return PrivateFile(os.dup(dir_fd), path.name)

    def remove(self, path: Path) -> None:
        """Delete the file ``path`` (never through a link; absent is fine)."""
        with self.directory(path.parent) as dir_fd:
            if dir_fd is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path.name, dir_fd=dir_fd)

    def files(self, dirs: Callable[[str], bool]) -> Iterator[tuple[Path, os.stat_result]]:
        """This user's regular files in the base's own subdirectories whose names ``dirs``
        accepts (one level), never through a link; what cannot be read is skipped."""
        names: list[str] = []
        base = self.root
        with contextlib.suppress(OSError, UntrustedPath):
            base = self.base_path()
            with self.directory(base) as fd:
                names = [] if fd is None else [e.name for e in os.scandir(fd) if dirs(e.name)]
        for name in sorted(names):
            with contextlib.suppress(OSError, UntrustedPath), self.directory(base / name) as fd:
                if fd is None:
                    continue
                for entry in sorted(os.scandir(fd), key=lambda e: e.name):
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                        yield base / name / entry.name, st
