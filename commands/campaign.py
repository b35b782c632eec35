"""`compile-ahead campaign run|status|report`: a grid of `ab` experiments as one command."""

from __future__ import annotations

import argparse
from pathlib import Path

from compile_ahead.commands.options import count
from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.campaigns.definition.validation.limits import MAX_BLOCKS, MAX_CELLS


def register(subparsers: argparse._SubParsersAction) -> None:
    camp = subparsers.add_parser(
        "campaign",
        help="a grid of `ab` experiments (models, ladders, formats, releases), resumable, "
        "here or on a Ray cluster",
        description="Run, inspect and report a campaign: a TOML file whose every cell is one "
        "`ab compile|schedule|baselines` experiment, run block by block into one SQLite store.",
    )
    actions = camp.add_subparsers(dest="campaign_action", required=True, metavar="ACTION")
    _register_run(actions)
    _register_status(actions)
    _register_report(actions)


def _register_run(actions: argparse._SubParsersAction) -> None:
    r = actions.add_parser(
        "run",
        help="run (or resume) a campaign",
        description="Validate the campaign, then run every block not yet done in the store. "
        "Run it again after an interruption: finished blocks are kept, interrupted ones rerun. "
        f"A campaign has at most {MAX_CELLS:,} cells and {MAX_BLOCKS:,} blocks (cells x pairs); "
        "a larger one is refused before anything is written.",
    )
    r.add_argument("spec", type=Path, help="the campaign file (TOML)")
    r.add_argument("--store", type=Path, required=True, help="the campaign's SQLite store")
    r.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: one block at a time here (default); ray: one block per node",
    )
    r.add_argument(
        "--address",
        default=None,
        help="with --executor ray: the cluster (e.g. HEAD:6379); none starts a one-node Ray here",
    )
    r.add_argument(
        "--retries",
        type=count(0),
        default=3,
        help="with --executor ray: reruns of a block whose node died (default 3)",
    )
    r.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="with --executor ray --address: how long to wait for the cluster to answer before "
        "giving up with an error (default 30)",
    )
    r.add_argument("--quiet", action="store_true", help="no progress lines")
    r.set_defaults(func=run_command)


def _register_status(actions: argparse._SubParsersAction) -> None:
    s = actions.add_parser("status", help="blocks done, failures, ETA")
    s.add_argument("store", type=Path)
    s.set_defaults(func=status_command)


def _register_report(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "report",
        help="per-cell `ab` reports, the cross-cell table, plots and the compare page",
        description="Write each cell's `ab report` files and the campaign's table, forest plots, "
        "(compile campaigns) history plots and its compare page (compare.html) into --out.",
    )
    p.add_argument("store", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--stratify",
        action="store_true",
        help="analyse a cell's blocks from different machines apart (by default such a cell "
        "is not pooled)",
    )
    p.add_argument("--no-plot", action="store_true")
    p.set_defaults(func=report_command)


def _seconds(text: str) -> float:
    from compile_ahead.commands.options import seconds

    return seconds(text)


def run_command(args: argparse.Namespace) -> int:
    from compile_ahead.commands.ab import check_cell
    from compile_ahead.output.checks import check_not_inputs
    from compile_ahead.profiling.campaigns.definition.spec import load_spec
    from compile_ahead.profiling.campaigns.definition.validation.limits import CheckProgress
    from compile_ahead.profiling.campaigns.execution.block_dirs import blocks_folder
    from compile_ahead.profiling.campaigns.execution.coordinator import Executor, run_campaign
    from compile_ahead.profiling.campaigns.persistence.store_lock import refuse_link

    refuse_link(args.store)  # before the spec's checks: nothing is made beside a link
    if args.executor == "local" and args.address is not None:
        raise CompileAheadError("--address is for --executor ray")

    def make_executor() -> Executor:
        if args.executor == "ray":
            from compile_ahead.profiling.campaigns.execution.executors.ray_cluster import (
                RayExecutor,
            )

            return RayExecutor(args.address, args.retries, args.connect_timeout)
        from compile_ahead.profiling.campaigns.execution.executors.local import LocalExecutor

        return LocalExecutor(blocks)

    blocks = blocks_folder(args.store)
    check_not_inputs({"--store": args.store, "--store's blocks folder": blocks}, [args.spec])
    progress = None if args.quiet else CheckProgress()
    spec = load_spec(args.spec, check_cell, progress)  # every cell checked before any write
    return run_campaign(spec, args.store, make_executor, quiet=args.quiet)


def status_command(args: argparse.Namespace) -> int:
    from compile_ahead.profiling.campaigns.execution.status import status_text

    print(status_text(args.store))
    return 0


def report_command(args: argparse.Namespace) -> int:
    from compile_ahead.output.checks import check_not_inputs
    from compile_ahead.profiling.campaigns.persistence.store import store_files
    from compile_ahead.profiling.campaigns.results.report import write_report

    check_not_inputs({"--out": args.out}, store_files(args.store))
    write_report(args.store, args.out, args.stratify, args.no_plot)
    return 0
