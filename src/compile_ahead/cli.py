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
import signal
import sys
import threading
from collections.abc import Sequence

from compile_ahead.errors import CompileAheadError

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


# The system's refusals of a file operation that are the environment's, not a bug.
REFUSED_WRITES = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}
)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM (e.g. from `timeout`) ends a run like Ctrl-C


def run_command(args: argparse.Namespace, prog: str) -> int:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        return int(args.func(args) or 0)
    except CompileAheadError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        # A file the system refused (disk full, read-only, no permission) that no command
        # step turned into its own message: still one line naming the file.
        if err.errno not in REFUSED_WRITES or err.filename is None:
            raise
        print(f"{prog}: error: {err.filename}: {err.strerror}", file=sys.stderr)
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
