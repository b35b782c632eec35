"""The argument parser every command is built on: a long flag is taken only as written.

argparse takes any unambiguous prefix of a long flag by default (``--ladde`` for ``--ladder``),
so a typo, or a name that a campaign's ``[options]`` hands to `ab`, can silently become another
flag. ``allow_abbrev=False`` refuses such a prefix as an unrecognized argument instead. The
parsers of subcommands are made with the class of their parent, so one class covers them all.
"""

from __future__ import annotations

import argparse
from typing import Any


class ExactParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` without abbreviations, for itself and its subcommands."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
