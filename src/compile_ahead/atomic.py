"""Write files so a crash never leaves a half-written file in place of a good one."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from compile_ahead.errors import write_error


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file renamed over it. A failed write
    (disk full, read-only, no permission) raises OutputWriteError naming ``path``; the
    temporary file is gone and an earlier ``path`` is untouched."""
    target = Path(path)
    tmp: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a report is an ordinary file
        os.replace(tmp, target)
        tmp = None
    except OSError as err:
        raise write_error(target, err) from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return target


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> Path:
    return write_bytes_atomic(path, (json.dumps(obj, indent=2) + "\n").encode())


@contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """Writes to ``path`` inside: a refusal (disk full, read-only) is OutputWriteError naming
    it (a failed flush on close does not name the file itself)."""
    try:
        yield
    except OSError as err:
        raise write_error(path, err) from None
