"""`compile-ahead patches check --npu-compiler PATH` (the check: profiling/npu_patches/check.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from compile_ahead.profiling.npu_patches import check as patches_check


def run_check(args: argparse.Namespace) -> int:
    patches_dir = args.patches or patches_check.default_patches_dir()
    pin = patches_check.Pin.load(patches_dir)
    checkout = args.npu_compiler.resolve()
    result = patches_check.check_checkout(checkout, pin)
    print("\n".join(patches_check.report(result, checkout, pin)))
    return 0 if result.ok else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "patches",
        help="patch series for upstream projects (patches/)",
        description=patches_check.__doc__,
    )
    commands = parser.add_subparsers(dest="patches_command", required=True, metavar="ACTION")
    check = commands.add_parser(
        "check",
        help="check an npu_compiler checkout against the pinned commit and the series",
        description="Exit 0 when the series applies (or is already applied) at the pin or on a "
        "descendant whose files the series touches are still the pinned ones; 1 otherwise, "
        "with the reasons.",
    )
    check.add_argument("--npu-compiler", type=Path, required=True, metavar="PATH")
    check.add_argument(
        "--patches",
        type=Path,
        default=None,
        metavar="DIR",
        help="the series directory (default: patches/npu_compiler of the source tree)",
    )
    check.set_defaults(func=run_check)
