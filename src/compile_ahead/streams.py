"""Standard output and error that a closed pipe or a full disk cannot break.

``run ... | head -1`` closes the pipe after one line and ``> /dev/full`` fails every write;
neither may cost a command its files, end it with a traceback or abort it. While a command
runs, sys.stdout and sys.stderr are wrapped (``guarded_streams``): a failed write is recorded,
the stream's descriptor is pointed at /dev/null (later writes, the interpreter's last flush
and native code's writes then go nowhere without an error) and the command goes on. Its exit
code then says so (``Streams.exit_code``): a closed pipe 141 (128 + SIGPIPE, what a shell
reports of a command that SIGPIPE ended), any other failure (no space, an I/O error) 2 with one
line on standard error naming the stream; a command that failed or was interrupted keeps its
own exit code.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

CLOSED_PIPE_EXIT = 141


class GuardedStream:
    """A text stream whose failed writes are recorded instead of raised."""

    def __init__(self, stream: TextIO, name: str):
        self._stream = stream
        self.name = name  # "standard output" / "standard error", for the message
        self.error: OSError | ValueError | None = None

    def write(self, text: str) -> int:
        if self.error is None:
            try:
                return self._stream.write(text)
            except (OSError, ValueError) as err:  # ValueError: a closed file
                self._failed(err)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.error is None:
            try:
                self._stream.flush()
            except (OSError, ValueError) as err:
                self._failed(err)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ...
        return getattr(self._stream, name)

    def _failed(self, err: OSError | ValueError) -> None:
        self.error = err
        silence(self._stream)


def silence(stream: TextIO) -> None:
    """Point ``stream``'s descriptor at /dev/null: what it still buffers, and anything written
    to it later (by Python or native code), goes nowhere without an error."""
    with contextlib.suppress(OSError, ValueError):  # io.UnsupportedOperation is both
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)


@dataclass
class Streams:
    out: GuardedStream
    err: GuardedStream

    def flush(self) -> None:
        self.out.flush()
        self.err.flush()

    def exit_code(self, code: int, prog: str) -> int:
        """The command's exit code, or, for a command that succeeded but could not write a
        standard stream, the stream's (see the module docstring)."""
        self.flush()
        failed = self.out if self.out.error is not None else self.err
        if code != 0 or failed.error is None:
            return code
        if isinstance(failed.error, OSError) and failed.error.errno == errno.EPIPE:
            return CLOSED_PIPE_EXIT
        reason = getattr(failed.error, "strerror", None) or str(failed.error)
        self.err.write(f"{prog}: error: {failed.name}: {reason}\n")
        self.err.flush()
        return 2


@contextlib.contextmanager
def guarded_streams() -> Iterator[Streams]:
    """sys.stdout and sys.stderr guarded while the block runs, flushed at its end."""
    saved = sys.stdout, sys.stderr
    # None: the descriptor was closed when Python started (`>&-`); what goes there is dropped.
    out, err = (stream if stream is not None else io.StringIO() for stream in saved)
    streams = Streams(GuardedStream(out, "standard output"), GuardedStream(err, "standard error"))
    sys.stdout, sys.stderr = streams.out, streams.err
    try:
        yield streams
    finally:
        streams.flush()
        sys.stdout, sys.stderr = saved


def flush_standard_streams() -> None:
    """At exit: flush both streams; one that cannot be written is silenced (the interpreter's
    own last flush would otherwise print an error)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is None:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):
            silence(stream)
