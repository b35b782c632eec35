"""`compile-ahead`: one command, a subcommand per capability.

Each capability module exposes ``register(subparsers)`` and sets ``func`` on its parser; the
function returns the process exit code. Errors meant for the user are CompileAheadError and
print as one line, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from typing import TextIO

from compile_ahead.errors import CompileAheadError, CompileAheadWarning

# Modules that add subcommands, imported lazily so `--help` stays fast.
SUBCOMMAND_MODULES = (
    "compile_ahead.runtime.cli.generate",
    "compile_ahead.runtime.cli.run",
    "compile_ahead.profiling.trials.cli",
    "compile_ahead.patches_check",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compile-ahead",
        description="Long-context decode on static-shape devices: compile ahead, not up front.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM (e.g. from `timeout`) ends a run like Ctrl-C


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


def run_command(args: argparse.Namespace, prog: str) -> int:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        with warnings.catch_warnings():
            _one_line_warnings(prog)
            return int(args.func(args) or 0)
    except CompileAheadError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args, "compile-ahead")


# Background compiles run on daemon threads with this name prefix (runtime/ladder/rung_policy.py).
COMPILE_THREAD_PREFIX = "compile-ahead-"


def exit_process(code: int) -> None:
    """End the process with ``code``. A compile still running (the run ended or was
    interrupted first) cannot be stopped, and tearing the interpreter and OpenVINO's
    libraries down under it crashes; so then exit at once, everything already written."""
    compiling = any(
        t.name.startswith(COMPILE_THREAD_PREFIX) and t.is_alive() for t in threading.enumerate()
    )
    if compiling:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def entry() -> None:
    """The `compile-ahead` console script."""
    exit_process(main())


if __name__ == "__main__":
    entry()
