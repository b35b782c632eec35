"""The argument parser every command is built on: a long flag is taken only as written.

argparse takes any unambiguous prefix of a long flag by default (``--ladde`` for ``--ladder``),
so a typo, or a name that a campaign's ``[options]`` hands to `ab`, can silently become another
flag. ``allow_abbrev=False`` refuses such a prefix as an unrecognized argument instead. The
parsers of subcommands are made with the class of their parent, so one class covers them all.

A flag it does not know is also named before any missing required one: argparse checks the
required arguments (and required groups) before it looks at what was left over, so
``generate --prompt-id 1`` would be told that one of --prompt, --prompt-ids, --prompts is
required. ExactParser checks them itself, only once nothing is left over.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


class ExactParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` without abbreviations, for itself and its subcommands."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # A required subcommand stays argparse's: nothing else is parsed without it.
        actions = [
            a for a in self._actions if a.required and not isinstance(a, argparse._SubParsersAction)
        ]
        groups = [g for g in self._mutually_exclusive_groups if g.required]
        self._set_required(actions, groups, False)
        try:
            parsed, extras = super().parse_known_args(args, namespace)
        finally:
            self._set_required(actions, groups, True)
        if not extras and not getattr(parsed, argparse._UNRECOGNIZED_ARGS_ATTR, None):
            self._check_required(parsed, actions, groups)
        return parsed, extras

    @staticmethod
    def _set_required(actions: list[argparse.Action], groups: list[Any], required: bool) -> None:
        for action in actions:
            action.required = required
        for group in groups:
            group.required = required

    def _check_required(
        self,
        parsed: argparse.Namespace,
        actions: list[argparse.Action],
        groups: list[Any],
    ) -> None:
        """argparse's own refusal of a required argument or group left out."""
        missing = [a for a in actions if getattr(parsed, a.dest, None) is None]
        if missing:
            names = ", ".join(argparse._get_action_name(a) or a.dest for a in missing)
            self.error(f"the following arguments are required: {names}")
        for group in groups:
            given = [a for a in group._group_actions if getattr(parsed, a.dest, None) is not None]
            if not given:
                names = " ".join(
                    argparse._get_action_name(a) or a.dest
                    for a in group._group_actions
                    if a.help is not argparse.SUPPRESS
                )
                self.error(f"one of the arguments {names} is required")
