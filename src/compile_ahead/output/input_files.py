"""Reading a small input file a user names on the command line (--prompts, --ov-config-file):
a regular file only, never through a symbolic link, and never more than a stated size.

The file is opened O_NOFOLLOW and O_NONBLOCK and checked on the opened descriptor, so a FIFO
cannot block the command, a device such as /dev/zero cannot fill its memory, and a link
cannot point the command at a file other than the one named. Anything else is one line.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.kind import file_kind

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_input_text(path: str | Path, what: str, max_bytes: int) -> str:
    """The UTF-8 text of the regular file ``path`` (a leading byte-order mark dropped), at
    most ``max_bytes`` bytes; ``what`` names it in a refusal (e.g. "--prompts FILE")."""
    data = read_input_bytes(path, what, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise CompileAheadError(f"{what}: not UTF-8 text (byte {err.start})") from None


def read_input_bytes(path: str | Path, what: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them."""
    try:
        fd = os.open(Path(path).expanduser(), _FLAGS)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise CompileAheadError(
                f"{what}: a symbolic link, which is not followed; name the file itself"
            ) from None
        raise CompileAheadError(f"{what}: cannot open it ({err.strerror or err})") from None
    st = os.fstat(fd)  # before fdopen, which refuses a directory with its own error
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise CompileAheadError(f"{what}: not a regular file ({file_kind(st.st_mode)})")
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > max_bytes:
            raise CompileAheadError(f"{what}: {st.st_size} bytes, over its {_size(max_bytes)} cap")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew while it was read
        raise CompileAheadError(f"{what}: over its {_size(max_bytes)} cap")
    return data


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n} bytes"
