"""The folders a campaign's blocks write into: each block's `ab` runs there and its trials read
their manifests from there, so another user who could change one could choose what a trial
runs. They are opened as the compile cache opens its own (runtime/compile/cache/dirs.py):

- Beside the store (the local executor): STORE.blocks, in the store's directory, which must be
  one whose entries only this user or root can rename (owned by either, and writable by others
  only with the sticky bit, as /tmp). On a Ray node: CACHE/campaigns of the user cache (in a
  shared cache root, this user's own uid-N directory there, as the compile cache does).
- The folder, and every folder below it, is made by this user (0700), opened without following
  a symbolic link and checked on the opened descriptor: this user's own directory, writable by
  no one else. Anything else (a folder another user made, one others can write, a link) is
  refused with ``UntrustedPath`` naming it; nothing is written into it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.user_cache import cache_root
from compile_ahead.runtime.compile.cache.dirs import (
    UntrustedPath,
    open_base,
    open_private_dir,
    open_private_subdirs,
    root_problem,
)

BLOCKS_SUFFIX = ".blocks"


def blocks_folder(store: Path) -> Path:
    """The local executor's folder of a store's blocks, absolute (the store's directory
    resolved, the folder's own name not: a link there is refused, never followed)."""
    return store.parent.resolve() / (store.name + BLOCKS_SUFFIX)


def _open_beside_store(root: Path, create: bool) -> int | None:
    """``root`` (STORE.blocks) opened and checked, created with ``create``; None when absent."""
    parent = os.open(root.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        problem = root_problem(os.fstat(parent))
        if problem is not None:
            raise UntrustedPath(root.parent, problem)
        return open_private_dir(parent, root.name, root, create, strict=True)
    finally:
        os.close(parent)


def check_blocks_folder(root: Path, create: bool = False) -> None:
    """One line (CompileAheadError) unless ``root`` is this user's private folder (or absent
    and not ``create``d)."""
    try:
        fd = _open_beside_store(root, create)
    except (UntrustedPath, OSError) as err:
        why = str(err) if isinstance(err, UntrustedPath) else f"{root}: {err.strerror or err}"
        advice = (
            "it must be a folder compile-ahead made for this user (0700): remove it or use "
            "another store"
        )
        if isinstance(err, UntrustedPath) and err.path == root.parent:
            advice = "put the store in a directory where no other user can rename its files"
        raise CompileAheadError(f"the blocks' folder cannot be used: {why}; {advice}") from None
    if fd is not None:
        os.close(fd)


def private_folder(root: Path | None, names: Sequence[str]) -> Path:
    """``root/names...`` as an absolute path (``root`` None: the user cache's campaigns
    folder), every folder created 0700 when absent and checked as the module docstring says.
    UntrustedPath or OSError when one cannot be used."""
    if root is None:
        base = open_base(cache_root() / "campaigns", create=True, own_root=True)
        root, fd = base.path, base.fd
    else:
        fd = _open_beside_store(root, create=True)
    fd = open_private_subdirs(fd, root, names, create=True, strict=True)
    if fd is None:  # created, so never absent
        raise FileNotFoundError(f"{root.joinpath(*names)} vanished while it was created")
    os.close(fd)
    return root.absolute().joinpath(*names)  # a block's processes run inside it
