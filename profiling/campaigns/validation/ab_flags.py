"""The long flags of `ab KIND`, read from the `ab` command's own parser, with how each takes its
value: what a campaign's ``[options]`` key may name, and how its TOML value becomes flags.

A flag takes one of:

- nothing (a switch, e.g. ``--pass-profile``);
- one value (``--device CPU``): given once, argparse keeps the last value given;
- one value that is a comma-separated list: its metavar says so as ``P[,P...]``
  (``--prompt-len 16,40``: one length per sequence);
- one value each time it is given, collected (argparse's ``append``/``extend``, e.g.
  ``--shape``).

The parser is read, not copied, so a flag added to `ab` is known here as `ab` takes it. The
`ab` command hands its parser's flags to the spec check (commands/ab.py, CellChecks), so this
module, below commands/, reads only argparse.
"""

from __future__ import annotations

import argparse
import enum
import re
from dataclasses import dataclass

# A metavar such as ``P[,P...]``: one item, or several joined by commas.
_COMMA_LIST_METAVAR = re.compile(r"(\w+)\[,\1\.\.\.\]")


class Takes(enum.Enum):
    NOTHING = "a switch"
    ONE = "one value"
    COMMA_LIST = "one value or a comma-separated list"
    REPEATED = "a value each time it is given"


@dataclass(frozen=True)
class AbFlag:
    name: str  # without "--": how an [options] key spells it
    dest: str  # what it sets; aliases (--decode-tokens, --max-new-tokens) share it
    takes: Takes


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
