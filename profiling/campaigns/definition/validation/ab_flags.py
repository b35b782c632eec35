"""The long flags of `ab KIND`, read from the `ab` command's own parser, with how each takes its
value: what a campaign's ``[options]`` key may name, and how its TOML value becomes flags.

A flag takes one of:

- nothing (a switch, e.g. ``--pass-profile``);
- one value (``--device CPU``): given once, argparse keeps the last value given;
- one value that is a comma-separated list: its metavar says so as ``P[,P...]``
  (``--prompt-len 16,40``: one length per sequence);
- one value each time it is given, collected (argparse's ``append``/``extend``, e.g.
  ``--shape``).

The `ab` command reads these from its own parser (commands/flag_table.py) and hands them to
the spec check (commands/ab.py, CellChecks), so a flag added to `ab` is known here as `ab`
takes it, and nothing below commands/ reads argparse.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


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
