"""Write files so a crash never leaves a half-written file in place of a good one, and a
write never replaces anything but a regular file.

Every output file is staged: written under a temporary name of its own beside the target
(cut to fit the file system's name limit whatever the target's length), privately, then
published by a rename. Just before the rename the destination is looked at again through the
directory the file was staged in: a destination that is now anything but a regular file (a
device, a FIFO, a socket, a symbolic link, a directory) is never renamed over; the staged file
is kept and named instead. The published file's mode and owner follow file_modes.py.
"""

from __future__ import annotations

import io
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from compile_ahead.errors import OutputWriteError, write_error
from compile_ahead.file_kind import file_kind
from compile_ahead.file_modes import PRIVATE_FILE, settle
from compile_ahead.output_paths import temporary_name

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TRIES = 100


class StagedFile:
    """A file written beside ``target`` under a temporary name, then published (renamed to
    ``target`` or another name in the same directory) or discarded. OSError from the system
    is the caller's to turn into a message (``write_error``)."""

    def __init__(self, target: str | os.PathLike[str], suffix: str = "") -> None:
        self.target = Path(target)
        prefix = "" if suffix else "."  # a visible suffix names a file meant to be found
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self._dir = os.open(self.target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd, self.name = self._create(prefix, suffix)
        except BaseException:
            os.close(self._dir)
            raise
        self.file = os.fdopen(fd, "wb")

    def _create(self, prefix: str, suffix: str) -> tuple[int, str]:
        for _ in range(_TRIES):
            name = temporary_name(self.target, prefix, suffix)
            with suppress(FileExistsError):
                return os.open(name, _CREATE, PRIVATE_FILE, dir_fd=self._dir), name
        raise FileExistsError(f"no free temporary name beside {self.target}")

    @property
    def path(self) -> Path:
        """Where the file is while it is written (and after a crash)."""
        return self.target.parent / self.name

    def _existing(self, name: str) -> os.stat_result | None:
        try:
            return os.lstat(name, dir_fd=self._dir)
        except FileNotFoundError:
            return None

    def _refuse_unless_regular(self, dest: Path, st: os.stat_result | None) -> None:
        if st is not None and not stat.S_ISREG(st.st_mode):
            self.file.close()
            self._close_dir()  # kept: discard() no longer removes it
            raise OutputWriteError(
                f"{dest}: is now {file_kind(st.st_mode)}, not replaced (outputs replace only "
                f"regular files); what was to go there is kept in {self.path}"
            )

    def publish(self, dest: Path | None = None) -> Path:
        """Flush to disk, give the file its mode and owner, and rename it to ``dest`` (default
        the target; a name in the same directory). A ``dest`` that is not a regular file (or
        absent) is refused with OutputWriteError, the staged file kept."""
        dest = self.target if dest is None else dest
        if dest.parent != self.target.parent:
            raise ValueError(f"{dest} is not beside {self.target}")
        self.file.flush()
        os.fsync(self.file.fileno())
        replaced = self._existing(dest.name)
        self._refuse_unless_regular(dest, replaced)
        settle(self.file.fileno(), False, replaced)
        self.file.close()
        self._refuse_unless_regular(dest, self._existing(dest.name))  # as late as can be
        os.replace(self.name, dest.name, src_dir_fd=self._dir, dst_dir_fd=self._dir)
        self._close_dir()
        return dest

    def discard(self) -> None:
        """Close and remove the staged file (nothing published); safe to call again."""
        with suppress(OSError):
            self.file.close()
        if self._dir >= 0:
            with suppress(OSError):
                os.unlink(self.name, dir_fd=self._dir)
        self._close_dir()

    def _close_dir(self) -> None:
        if self._dir >= 0:
            os.close(self._dir)
            self._dir = -1


def write_bytes_atomic(
    path: str | os.PathLike[str], data: bytes, dest: str | os.PathLike[str] | None = None
) -> Path:
    """Write ``data`` to ``dest`` (default ``path``, else a name beside it: a failed run's
    sibling) through a staged file. A failed write (disk full, read-only, no permission)
    raises OutputWriteError naming the file; the staged file is gone and an earlier file is
    untouched. Returns where the data went."""
    target = Path(path)
    where = target if dest is None else Path(dest)
    try:
        staged = StagedFile(target)
    except OSError as err:
        raise write_error(where, err) from None
    try:
        staged.file.write(data)
        return staged.publish(where)
    except OSError as err:
        staged.discard()
        raise write_error(where, err) from None
    except BaseException:  # an interrupt: nothing half-written is left behind
        staged.discard()
        raise


def write_json_atomic(
    path: str | os.PathLike[str], obj: Any, dest: str | os.PathLike[str] | None = None
) -> Path:
    return write_bytes_atomic(
        path, (json.dumps(obj, indent=2, allow_nan=False) + "\n").encode(), dest
    )


def write_figure_atomic(figure: Any, path: str | os.PathLike[str], dpi: int = 110) -> Path:
    """A matplotlib figure saved as ``write_bytes_atomic`` writes (the format from the suffix)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", dpi=dpi)
    return write_bytes_atomic(path, buffer.getvalue())


@contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """Writes to ``path`` inside: a refusal (disk full, read-only) is OutputWriteError naming
    it (a failed flush on close does not name the file itself)."""
    try:
        yield
    except OSError as err:
        raise write_error(path, err) from None
