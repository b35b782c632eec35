"""Every parser of both console scripts takes a long flag only as written: an abbreviation
(``--ladde`` for ``--ladder``) is refused as an unrecognized argument, never taken as another
flag, on every command and subcommand."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from compile_ahead.commands.main import build_parser
from compile_ahead.commands.profile_compile import build_parser as profile_parser


class Refused(Exception):
    pass


def _parsers(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, object]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _parsers(child, f"{name} {sub}")


def _abbreviations(parser: argparse.ArgumentParser) -> list[str]:
    """A prefix of each long flag that names no other flag (what argparse would expand)."""
    flags = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    found = []
    for flag in flags:
        prefix = flag[:-1]
        if len(prefix) > 2 and not any(f.startswith(prefix) for f in flags if f != flag):
            found.append(prefix)
    return found


PARSERS = [*_parsers(build_parser(), "compile-ahead"), *_parsers(profile_parser(), "profile")]


def test_every_command_is_walked() -> None:
    names = [name for name, _ in PARSERS]
    for expected in ("compile-ahead ab compile", "compile-ahead campaign run", "profile"):
        assert expected in names
    assert len(names) > 15


@pytest.mark.parametrize(("name", "parser"), PARSERS, ids=[n for n, _ in PARSERS])
def test_no_parser_takes_an_abbreviated_flag(name: str, parser: argparse.ArgumentParser):
    """Each abbreviation alone on the command line, every argument made optional so that only
    the abbreviation can be refused: it must be an unrecognized argument."""
    for action in parser._actions:
        action.required = False
    for group in parser._mutually_exclusive_groups:
        group.required = False

    def refuse(message: str):
        raise Refused(message)

    parser.error = refuse  # type: ignore[method-assign]
    prefixes = _abbreviations(parser)
    for prefix in prefixes:
        with pytest.raises(Refused, match=f"unrecognized arguments: {prefix}$"):
            parser.parse_args([prefix])


def test_an_abbreviation_is_refused_by_the_command(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "compile_ahead.commands", "ab", "report", str(tmp_path), "--no-pl"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "unrecognized arguments: --no-pl" in proc.stderr
