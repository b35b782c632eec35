"""How every command runs, from its first line to its exit: the interrupt signals handled and
the standard streams guarded from the start, errors meant for the user as one line
(``PROG: error: ...``, exit 2), an interrupt as exit 130, and an exit that never tears OpenVINO
down under a compile still running. Shared by both console scripts (`compile-ahead` and
`profile-compile`).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import TextIO

from compile_ahead.errors import CompileAheadError, CompileAheadWarning
from compile_ahead.interrupts import (
    INTERRUPTED_EXIT,
    deferred,
    handle_interrupts,
    helpers_running,
    ignore_interrupts,
    interrupted,
    run_exit_hooks,
)
from compile_ahead.shown_text import shown
from compile_ahead.streams import flush_standard_streams, guarded_streams

BUG_EXIT = 1  # an error no command step turned into a message: its traceback is printed
# The system's refusals of a file operation that are the environment's, not a bug.
REFUSED_WRITES = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}
)


def _one_line_warnings(prog: str) -> None:
    """Our own warnings print as ``PROG: warning: MESSAGE``; others keep Python's format."""
    python_format = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if not issubclass(category, CompileAheadWarning):
            python_format(message, category, filename, lineno, file, line)
            return
        text = shown(" ".join(str(message).split()))  # one line, whatever the message holds
        print(f"{prog}: warning: {text}", file=file or sys.stderr, flush=True)

    warnings.showwarning = show


def run_command(prog: str, parse: Callable[[], argparse.Namespace]) -> int:
    """Parse the command line (``parse``) and run the command it names (``args.func``): from
    here to the end the interrupt signals are handled (interrupts.py) and the standard streams
    guarded (streams.py). Returns the exit code: 2 for an error (one line), 130 interrupted."""
    with guarded_streams() as streams:
        restore: Callable[[], None] | None = None
        code = 0
        try:
            restore = handle_interrupts(prog)
            with warnings.catch_warnings():
                _one_line_warnings(prog)
                with deferred():  # the parser's imports are never cut halfway
                    args = parse()
                code = int(args.func(args) or 0)
            if code == 0 and interrupted():  # a signal noted while it finished its work
                code = _interrupted(prog)
        except CompileAheadError as err:
            print(f"{prog}: error: {shown(str(err))}", file=sys.stderr)  # one line, as said
            code = 2
        except KeyboardInterrupt:
            code = _interrupted(prog)
        except Exception as err:
            code = _unexpected(prog, err)
        except SystemExit as done:  # argparse: --help, or a usage error (already printed)
            if done.code in (0, None):
                raise SystemExit(streams.exit_code(0, prog)) from None
            raise
        finally:
            if restore is not None:
                restore()
        return streams.exit_code(code, prog)


def _interrupted(prog: str) -> int:
    print(f"{prog}: interrupted", file=sys.stderr)
    return INTERRUPTED_EXIT


def _unexpected(prog: str, err: Exception) -> int:
    """The exit code of an error no command step turned into its own message, or ``err``
    raised again (a bug: its traceback is wanted)."""
    if isinstance(err, OSError) and err.errno in REFUSED_WRITES and err.filename is not None:
        # A file the system refused (disk full, read-only, no permission): still one line.
        print(f"{prog}: error: {err.filename}: {err.strerror}", file=sys.stderr)
        return 2
    if interrupted():  # a library turned the interrupt into its own error (e.g. ImportError)
        return _interrupted(prog)
    raise err


def exit_process(code: int, at_once: bool = False) -> None:
    """End the process with ``code``, everything already written. A helper thread still
    running (a compile the command abandoned cannot be stopped, and tearing the interpreter
    and OpenVINO's libraries down under it crashes) makes it exit at once, and so does an
    interrupt (or ``at_once``: work cut short by a bug): after an interrupted `generate
    --decode-compile during-prefill` the teardown aborted ("terminate called without an active
    exception") also with no compile running."""
    ignore_interrupts()
    run_exit_hooks()  # e.g. temporary files of cache entries that threads still write
    flush_standard_streams()
    if at_once or helpers_running() or interrupted():
        os._exit(code)
    sys.exit(code)


def console_script(main: Callable[[], int]) -> None:
    """A console script: end the process (exit_process) with ``main()``'s exit code, also
    after a bug, whose traceback is printed (exit 1) before the process ends at once."""
    try:
        code, bug = main(), False
    except Exception:
        traceback.print_exc()
        code, bug = BUG_EXIT, True
    exit_process(code, at_once=bug)
