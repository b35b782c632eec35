"""The long flags of an argparse parser as the campaign spec check names them (AbFlag): each
flag's name, what it sets, and how it takes its value
(profiling/campaigns/definition/validation/ab_flags.py). Read from the parser, never copied, so
a flag added to `ab` is known as `ab` takes it."""

from __future__ import annotations

import argparse
import re

from compile_ahead.profiling.campaigns.definition.validation.ab_flags import AbFlag, Takes

# A metavar such as ``P[,P...]``: one item, or several joined by commas.
_COMMA_LIST_METAVAR = re.compile(r"(\w+)\[,\1\.\.\.\]")


def _takes(action: argparse.Action) -> Takes:
    if action.nargs == 0:
        return Takes.NOTHING
    if isinstance(action, argparse._AppendAction):  # "append", and "extend" (a subclass)
        return Takes.REPEATED
    if isinstance(action.metavar, str) and _COMMA_LIST_METAVAR.fullmatch(action.metavar):
        return Takes.COMMA_LIST
    return Takes.ONE


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            sub: argparse.ArgumentParser = action.choices[name]
            return sub
    raise LookupError(f"no subcommand {name!r}")


def parser_flags(parser: argparse.ArgumentParser) -> dict[str, AbFlag]:
    """``NAME -> AbFlag`` for every long flag of ``parser``, as it spells them."""
    flags: dict[str, AbFlag] = {}
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--"):
                flags[option[2:]] = AbFlag(option[2:], action.dest, _takes(action))
    return flags
