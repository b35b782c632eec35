"""`compile-ahead`: one command, a subcommand per capability.

Each command module of this package has ``register(subparsers)``, which adds its parser and
sets ``func`` on it; the function returns the process exit code. The modules are imported when
the parser is built, and each imports what its command runs only when it runs, so `--help`
stays fast: building the parser loads none of numpy, scipy, matplotlib, OpenVINO, torch,
transformers or Ray (tests/test_startup_imports.py holds it). How a command runs (signals,
streams, one-line errors, the exit) is running.py's. This module imports nothing at its top:
the console script notes the interrupt signals (early_signals.py) before it loads anything
that takes time.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself takes time to import
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    from compile_ahead.commands import (
        ab,
        campaign,
        compare,
        generate,
        patches,
        run,
        serve,
        trace,
    )
    from compile_ahead.commands.parsers import ExactParser

    parser = ExactParser(
        prog="compile-ahead",
        description="Long-context decode on static-shape devices: compile ahead, not up front.",
    )
    parser.set_defaults(invocation=None)  # main() records how the command was started
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (generate, run, serve, ab, campaign, compare, trace, patches):
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import sys

    from compile_ahead.commands.running import run_command
    from compile_ahead.output.checks import invocation

    argv = list(sys.argv[1:] if argv is None else argv)

    def parse() -> argparse.Namespace:
        args = build_parser().parse_args(argv)
        args.invocation = invocation("compile-ahead", argv)
        return args

    return run_command("compile-ahead", parse)


def entry() -> None:
    """The `compile-ahead` console script."""
    from compile_ahead.early_signals import note_signals

    note_signals()  # first: a signal while the modules load ends the command with 130
    from compile_ahead.commands.running import console_script

    console_script(main)


if __name__ == "__main__":
    entry()
