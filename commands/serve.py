"""`compile-ahead serve`: the serving engine on a model. With --requests it replays a request
file in-process (the serving engine's own command); without, it listens as an
OpenAI-compatible HTTP endpoint (commands/serve_listen.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from compile_ahead.commands.options import (
    add_ladder_option,
    add_model_options,
    add_synthetic_dtype_option,
)
from compile_ahead.commands.serve_listen import add_listen_options
from compile_ahead.errors import CompileAheadError

POLICIES = ("ahead", "up-front", "on-demand")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve a model: replay a request file (--requests) or listen as an "
        "OpenAI-compatible endpoint",
    )
    add_model_options(p)
    add_synthetic_dtype_option(p)
    add_ladder_option(p, auto=False)
    p.add_argument(
        "--buckets",
        default="1,2,4",
        metavar="B,B,...",
        help="the batch sizes the engine may run at (default 1,2,4)",
    )
    p.add_argument(
        "--policy",
        choices=POLICIES,
        default="ahead",
        help="when buckets compile: ahead (in the background, before they are needed; "
        "default), up-front (all before serving), on-demand (when first needed)",
    )
    p.add_argument(
        "--requests",
        type=Path,
        default=None,
        metavar="FILE",
        help="replay this request file (JSONL) in-process; without it the command listens",
    )
    add_listen_options(p)
    p.set_defaults(func=run)


def batch_sizes(text: str) -> tuple[int, ...]:
    """--buckets: comma-separated batch sizes, each at least 1, increasing."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise CompileAheadError(
            f"--buckets must be comma-separated integers, got {text!r}"
        ) from None
    if not sizes or any(b < 1 for b in sizes) or list(sizes) != sorted(set(sizes)):
        raise CompileAheadError(
            f"--buckets must be increasing batch sizes of at least 1, got {text}"
        )
    return sizes


def run(args: argparse.Namespace) -> int:
    sizes = batch_sizes(args.buckets)
    if args.requests is None:
        from compile_ahead.commands.serve_listen import listen

        return listen(args, sizes)
    raise CompileAheadError("serve --requests: the replay is not part of this build yet")
