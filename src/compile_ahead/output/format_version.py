"""The results format's version: every file of results the tools write (experiment.json, an
`ab` report's JSON, a profile-compile report, a run report, a campaign store's meta and a
`campaign report` summary) carries it under ``format_version``, so a later compile-ahead knows
what it reads. A file without it is version 0: written before the format had a version.

A reader takes the current version and every earlier one, and refuses a newer one in one line
naming it (docs/architecture/results-format.md says what changed in each).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compile_ahead.errors import CompileAheadError

FORMAT_KEY = "format_version"
FORMAT_VERSION = 1  # 0: no version written; 1: the version written (nothing else changed)


def stamped(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with the current version as its first key."""
    return {FORMAT_KEY: FORMAT_VERSION, **data}


def check_version(value: object, where: Path | str) -> int:
    """The version ``value`` names (None: 0), or one line saying why it cannot be read."""
    if value is None:
        return 0
    if isinstance(value, str) and value.isdigit():
        value = int(value)  # a campaign store keeps its meta as text
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CompileAheadError(f"{where}: {FORMAT_KEY} {value!r} is not a version number")
    if value > FORMAT_VERSION:
        raise CompileAheadError(
            f"{where}: results format version {value} is newer than this compile-ahead reads "
            f"(up to {FORMAT_VERSION}); read it with a newer compile-ahead"
        )
    return value


def version_of(data: Mapping[str, Any], where: Path | str) -> int:
    """The version of a parsed results file (its ``format_version``; none: 0)."""
    return check_version(data.get(FORMAT_KEY), where)
